r"""Evaluate models from an evaluation config; writes a report and logs it to MLflow.

    python ray_jobs/evaluate.py --config configs/eval/demo_retrieval.yaml [--set ...] [--run-id RUN]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- \
        "$PWD/.venv/bin/python" ray_jobs/evaluate.py --config configs/eval/openoffice_retrieval.yaml
"""
import sys

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import main

if __name__ == "__main__":
    main(["evaluate", "run", *sys.argv[1:]])
