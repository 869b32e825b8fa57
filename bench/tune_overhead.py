"""Ray Tune's cost per trial, and a real study at toy or full size.

Overhead mode (default): the same function trial (`quadratic`, sleeping --work-s per report to stand
in for real work) is called N times in a plain Python loop, then run as a study of N trials
(Optuna TPE, FIFO, one MLflow child run per trial, --concurrency at a time). Reported: wall-clock per
trial of both, their ratio, and the added seconds per trial.

Real mode (--real): runs a shipped function-trial space end to end and compares the best trial's
metric with the untuned default (k=5 everywhere, scikit-learn's default). The default space,
`tune_spaces/knn_k_ade.yaml`, tunes k of the KNN NER and relation-extraction classifiers on ADE
fold 0 with frozen MiniLM (needs ../shared/data); `tune_spaces/knn_k.yaml` tunes a KNN classifier
on the shipped trouble reports.

    python bench/tune_overhead.py [--trials 20] [--work-s 0.2] [--concurrency 2]
    python bench/tune_overhead.py --real [--space tune_spaces/knn_k_ade.yaml] [--samples 30] [--limit N]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result

REPO = Path(__file__).resolve().parents[1]


def overhead(trials: int, work_s: float, concurrency: int) -> dict:
    from lmplatform.tune import quadratic, run_study

    start = time.perf_counter()
    for i in range(trials):
        list(quadratic(x=i / trials, y=0.0, steps=1, sleep_s=work_s))
    loop_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="lmp-bench-tune-") as tmp:
        space = REPO / "tune_spaces/quadratic_smoke.yaml"
        sets = [f"num_samples={trials}", f"max_concurrent={concurrency}", f"resources.cpu={1.0 / concurrency}",
                "function_args.steps=1", f"function_args.sleep_s={work_s}", f"storage_path={tmp}/tune"]
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
        from lmplatform.ray_runtime import ensure_ray

        t0 = time.perf_counter()
        ensure_ray()
        ray_start_s = time.perf_counter() - t0
        start = time.perf_counter()
        result = run_study(space, sets, verbose=0)
        study_s = time.perf_counter() - start
    per_loop, per_study = loop_s / trials, study_s / trials
    out = {
        "trials": trials, "work_s_per_trial": work_s, "concurrency": concurrency,
        "loop_s_per_trial": round(per_loop, 4), "study_s_per_trial": round(per_study, 4),
        "ratio_study_over_loop": round(per_study / per_loop, 2) if per_loop else None,
        "added_s_per_trial": round(per_study - per_loop, 4), "ray_start_s": round(ray_start_s, 2),
        "best_final_score": result.best_metrics.get("final_score"),
    }
    print(f"plain loop {per_loop:.3f} s/trial, study {per_study:.3f} s/trial "
          f"(x{out['ratio_study_over_loop']}, +{out['added_s_per_trial']:.3f} s per trial, concurrency {concurrency}); "
          f"Ray start {ray_start_s:.1f} s not included")
    return out


UNTUNED = {  # the defaults a user gets without tuning
    "lmplatform.tune.trials:knn_relations": {"k_ner": 5, "k_re": 5},
    "lmplatform.tune.trials:knn_classification": {"k": 5, "weights": "uniform"},
}


def real(space: str, samples: int, limit: int | None) -> dict:
    from lmplatform.tune import import_callable, load_space, run_study

    sets = [f"num_samples={samples}"] + ([f"function_args.limit={limit}"] if limit else [])
    loaded = load_space(REPO / space, sets)
    if loaded.space.function not in UNTUNED:
        raise SystemExit(f"--real supports the function-trial spaces {sorted(UNTUNED)}; {space} runs {loaded.space.function}")
    fn, args = import_callable(loaded.space.function or ""), dict(loaded.space.function_args)
    untuned = UNTUNED[loaded.space.function]
    start = time.perf_counter()
    default = fn(**args, **untuned)  # also fills the embedding cache, as the study's first trial would
    default_s = time.perf_counter() - start
    start = time.perf_counter()
    result = run_study(REPO / space, sets, verbose=1)
    study_s = time.perf_counter() - start
    metric = loaded.space.metric
    out = {
        "space": space, "samples": samples, "limit": limit, "metric": metric,
        "default": {"params": untuned, "metrics": default, "seconds": round(default_s, 2)},
        "best": {"params": result.best_params, "metrics": result.best_metrics},
        "gain": round(result.best_metrics[metric] - default[metric], 4),
        "study_s": round(study_s, 1), "seconds_per_trial": round(study_s / samples, 2), "study": result.study_name,
    }
    print(f"{metric}: untuned default {default[metric]:.4f} -> best {result.best_metrics[metric]:.4f} "
          f"with {result.best_params} ({samples} trials, {study_s:.0f} s; the first call, with encoding, took {default_s:.0f} s)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--work-s", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--space", default="tune_spaces/knn_k_ade.yaml")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--limit", type=int, default=None, help="Rows read for --real (default: all).")
    args = parser.parse_args()
    if args.real:
        write_result("tune_real", real(args.space, args.samples, args.limit))
    else:
        write_result("tune_overhead", overhead(args.trials, args.work_s, args.concurrency))


if __name__ == "__main__":
    main()
