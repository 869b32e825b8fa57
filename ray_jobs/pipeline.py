"""Run a multi-stage pipeline (each stage a Ray Train job under one MLflow parent run).

    python ray_jobs/pipeline.py --config configs/pipelines/ms_ewc.yaml [--set ...] [--resume PIPELINE_RUN]
    ray job submit --working-dir . -- python ray_jobs/pipeline.py --config configs/pipelines/ms_ewc.yaml
"""
import sys

from lmplatform.cli import main

if __name__ == "__main__":
    main(["pipeline", "run", *sys.argv[1:]])
