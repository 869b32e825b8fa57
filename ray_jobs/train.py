r"""Train one objective as a Ray Train job.

    python ray_jobs/train.py --config configs/mlm.yaml [--set optim.max_steps=5] [--resume RUN]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- \
        "$PWD/.venv/bin/python" ray_jobs/train.py --config configs/mlm.yaml
"""
import sys

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import main

if __name__ == "__main__":
    main(["train", *sys.argv[1:]])
