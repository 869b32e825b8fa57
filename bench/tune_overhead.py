"""Ray Tune's cost per trial, and a real study at toy or full size.

Overhead mode (default): the same function trial (`quadratic`, sleeping --work-s per report to stand
in for real work) is called N times in a plain Python loop, then run as a study of N trials
(Optuna TPE, FIFO, one MLflow child run per trial, --concurrency at a time). Reported: wall-clock per
trial of both, their ratio, and the added seconds per trial.

Real mode (--real): runs a shipped space end to end. In this branch `tune_spaces/knn_k.yaml` (KNN
classifier k on frozen MiniLM embeddings of the shipped trouble reports) works; the
infonce_temperature space needs the biencoder objective from another branch. Compared: the best
trial's metric against the untuned default (k=5, uniform votes, scikit-learn's defaults).

    python bench/tune_overhead.py [--trials 20] [--work-s 0.2] [--concurrency 2]
    python bench/tune_overhead.py --real [--space tune_spaces/knn_k.yaml] [--samples 20] [--limit 320]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def overhead(trials: int, work_s: float, concurrency: int) -> dict:
    from lmplatform.tune.trials import quadratic
    from lmplatform.tune.tuner import run_study

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


def real(space: str, samples: int, limit: int | None) -> dict:
    from lmplatform.tune.space import load_space
    from lmplatform.tune.tuner import run_study

    sets = [f"num_samples={samples}"] + ([f"function_args.limit={limit}"] if limit else [])
    loaded = load_space(REPO / space, sets)
    if loaded.space.trial != "function":
        raise SystemExit(f"--real supports function-trial spaces in this script; {space} is a {loaded.space.trial} study")
    fn, args = loaded.load_function(), dict(loaded.space.function_args)
    start = time.perf_counter()
    default = fn(**args, k=5, weights="uniform")  # the untuned default
    default_s = time.perf_counter() - start
    start = time.perf_counter()
    result = run_study(REPO / space, sets, verbose=1)
    study_s = time.perf_counter() - start
    metric = loaded.space.metric
    out = {
        "space": space, "samples": samples, "limit": limit, "metric": metric,
        "default": {"params": {"k": 5, "weights": "uniform"}, metric: default[metric], "seconds": round(default_s, 2)},
        "best": {"params": result.best_params, metric: result.best_metrics.get(metric)},
        "study_s": round(study_s, 1), "study": result.study_name,
    }
    print(f"{metric}: untuned default {default[metric]:.4f} -> best {result.best_metrics.get(metric):.4f} "
          f"with {result.best_params} ({samples} trials, {study_s:.0f} s)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--work-s", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--space", default="tune_spaces/knn_k.yaml")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--limit", type=int, default=None, help="Documents for --real (default: all).")
    args = parser.parse_args()
    if args.real:
        write_result("tune_real", real(args.space, args.samples, args.limit))
    else:
        write_result("tune_overhead", overhead(args.trials, args.work_s, args.concurrency))


if __name__ == "__main__":
    main()
