r"""KNN NER / relation extraction over 10 folds, one Ray task per fold (the `--task relation-extraction` job).

    python ray_jobs/evaluate_relations.py -c configs/eval/relations_ade.yaml [--set folds=[0]] [--local]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- \
        "$PWD/.venv/bin/python" ray_jobs/evaluate_relations.py -c configs/eval/relations_ade.yaml
"""
import sys

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import main

if __name__ == "__main__":
    main(["graph", "evaluate", *sys.argv[1:]])
