"""Train one objective as a Ray Train job.

    python ray_jobs/train.py --config configs/mlm.yaml [--set optim.max_steps=5] [--resume RUN]
    ray job submit --working-dir . -- python ray_jobs/train.py --config configs/mlm.yaml
"""
import sys

from lmplatform.cli import main

if __name__ == "__main__":
    main(["train", *sys.argv[1:]])
