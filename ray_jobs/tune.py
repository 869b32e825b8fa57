r"""Run a hyperparameter study (Ray Tune + Optuna) described by a search space file.

    python ray_jobs/tune.py --space tune_spaces/mlm_lr.yaml [--set num_samples=20] [--resume latest]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- \
        "$PWD/.venv/bin/python" ray_jobs/tune.py --space tune_spaces/knn_k.yaml
"""
import sys

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import main

if __name__ == "__main__":
    main(["tune", *sys.argv[1:]])
