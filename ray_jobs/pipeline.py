r"""Run a multi-stage pipeline (each stage a Ray Train job under one MLflow parent run).

    python ray_jobs/pipeline.py --config configs/pipelines/ms_ewc.yaml [--set ...] [--resume PIPELINE_RUN]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- \
        "$PWD/.venv/bin/python" ray_jobs/pipeline.py --config configs/pipelines/ms_ewc.yaml
"""
import sys

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import main

if __name__ == "__main__":
    main(["pipeline", "run", *sys.argv[1:]])
