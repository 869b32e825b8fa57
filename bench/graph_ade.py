"""Graph contrastive learning on the ADE corpus with MiniLM, against the paper's CharacterBERT-medical figures.

Per fold: CLNER, CLDR and CLGS encoders are trained on Ray Train on the fold's training ids only
(objective.fold), then the fold-parallel evaluation reports
  - CLGS graph identification accuracy (positive graph among 3 hard negatives, chance 0.25),
  - the linear-probe table (P/R/F1) for the frozen baseline, CLGS- and CLDR-tuned encoders,
  - KNN NER (CLNER space), KNN RE and RE- (CLDR space) macro-F1 with k chosen on 10% of each fold's train,
  - the same KNN protocol (same folds, same validation split for k) on the untrained MiniLM, and the
    per-fold differences trained - frozen: without them a trained score cannot show that training moved anything,
as mean and std over folds. Paper (CharacterBERT-medical): NER 88.3, RE 79.97, RE- 86.5 (reference column).

    python bench/graph_ade.py                    # full: folds 0-2, one full epoch per encoder per fold
    python bench/graph_ade.py --folds 0 1 2 3 4 5 6 7 8 9   # all ten folds (about 3x the CPU time)
    python bench/graph_ade.py --toy              # folds 0 1, 100 sentences, 2 steps: checks that everything runs
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ADE = SHARED_DATA / "ade_corpus_v2"
PAPER = {"ner_macro_f1": 0.883, "re_macro_f1": 0.7997, "re_minus_macro_f1": 0.865}
METRIC_NAMES = {"ner_macro_f1": "KNN NER macro-F1 (CLNER space)", "re_macro_f1": "KNN RE macro-F1 (CLDR space, strict)",
                "re_minus_macro_f1": "KNN RE- macro-F1 (boundaries free)"}
VARIANTS = ("clner", "cldr", "clgs")
# --toy: the smallest run that still has two folds, so std and trained - frozen are computed as in the full run
TOY = {"folds": [0, 1], "limit": 100, "max_steps": 2}


def _cell(stats: dict[str, float], signed: bool = False) -> str:
    return f"{stats['mean']:+.3f} ± {stats['std']:.3f}" if signed else f"{stats['mean']:.3f} ± {stats['std']:.3f}"


def knn_table(summary: dict, folds: int) -> str:
    """Trained, frozen MiniLM, trained - frozen (mean ± std of the per-fold differences) and the paper's figures."""
    from lmplatform.markdown import markdown_table

    header = [f"metric (mean ± std over {folds} folds)", "MiniLM, graph-CL trained", "MiniLM, frozen (untrained)",
              "trained − frozen", "paper, CharacterBERT-medical"]
    rows = [[METRIC_NAMES[key], _cell(summary["knn"][key]), _cell(summary["knn_baseline"][key]),
             _cell(summary["knn_gain"][key], signed=True), f"{value:.3f}"] for key, value in PAPER.items()]
    return markdown_table(header, rows)


def train_fold(variant: str, fold: int, args: argparse.Namespace, workdir: Path, tracking_uri: str) -> tuple[Path, float]:
    from lmplatform.config import load_run_config
    from lmplatform.train.run import run_training

    overrides = [
        f"model.name_or_path={args.model}", f"data.train_paths={args.data}", f"objective.folds_file={args.folds_file}",
        f"objective.fold={fold}", f"objective.variant={variant}", f"optim.batch_size={args.batch_size}",
        f"optim.lr={args.lr}", f"scaling.cpus_per_worker={args.cpus}", f"checkpoint.storage_path={workdir / 'runs'}",
        f"tracking.tracking_uri={tracking_uri}", "tracking.experiment=bench-graph-ade", "tracking.register_model=false",
        f"tracking.run_name=bench-{variant}-fold{fold}-{int(time.time())}",
    ]
    overrides += [f"optim.max_steps={args.max_steps}"] if args.max_steps else [f"optim.epochs={args.epochs}"]
    if args.gpu:
        overrides.append("scaling.use_gpu=true")
    if args.limit:
        overrides.append(f"data.max_documents={args.limit}")
    cfg = load_run_config(REPO / f"configs/graph_cl_{variant}.yaml", overrides)
    started = time.perf_counter()
    result = run_training(cfg)
    link = workdir / f"fold{fold}" / variant
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(result.model_dir)
    return link, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(ADE / "ade_full.jsonl"))
    parser.add_argument("--folds-file", default=str(ADE / "folds.json"))
    parser.add_argument("--folds", type=int, nargs="+", default=[0, 1, 2],
                        help="Folds to train and score (mean ± std needs at least 2).")
    parser.add_argument("--model", default="default")
    parser.add_argument("--limit", type=int, default=None, help="Read only the first N sentences (toy runs).")
    parser.add_argument("--epochs", type=float, default=1.0, help="Passes over each fold's training sentences.")
    parser.add_argument("--max-steps", type=int, default=None, help="Stop each training run here (overrides --epochs).")
    parser.add_argument("--toy", action="store_true", help=f"Check that everything runs: {TOY}.")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--cpus", type=float, default=2, help="CPUs per training worker.")
    parser.add_argument("--gpu", action="store_true", help="Train on one GPU per worker (evaluation stays on CPU).")
    parser.add_argument("--workdir", default=None, help="Where runs and fold model links go (default: a temp folder).")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--name", default="graph_ade")
    args = parser.parse_args()
    if args.toy:
        args.folds, args.limit, args.max_steps = TOY["folds"], TOY["limit"], TOY["max_steps"]
        args.name = f"{args.name}_toy"
    if len(args.folds) < 2:
        print(f"[bench] warning: {len(args.folds)} fold; the std over folds is 0 and says nothing", flush=True)

    from lmplatform.graph.evaluation import RelationEvalConfig, run_cross_validation
    from lmplatform.ray_runtime import ensure_ray

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-graph-ade-")).resolve()
    tracking_uri = args.tracking_uri or f"sqlite:///{workdir / 'mlruns.db'}"
    ensure_ray()
    started = time.perf_counter()
    train_seconds: dict[str, float] = {}
    for fold in args.folds:
        for variant in VARIANTS:
            _, seconds = train_fold(variant, fold, args, workdir, tracking_uri)
            train_seconds[f"{variant}_fold{fold}"] = round(seconds, 1)
            print(f"[bench] trained {variant} fold {fold} in {seconds:.0f}s", flush=True)
    template = str(workdir / "fold{fold}")
    cfg = RelationEvalConfig(
        data_path=args.data, folds_file=args.folds_file, folds=args.folds, limit=args.limit,
        ner_model=f"{template}/clner", re_model=f"{template}/cldr", clgs_model=f"{template}/clgs", base_model=args.model,
        probe_models={"baseline": args.model, "clgs": f"{template}/clgs", "cldr": f"{template}/cldr"},
        baseline_model=args.model,
    )
    eval_started = time.perf_counter()
    summary = run_cross_validation(cfg, workdir / "eval", tracking_uri, "bench-graph-ade", parallel=True)
    eval_seconds = time.perf_counter() - eval_started

    knn = summary["knn"]
    checks = {key: check(f"KNN {key} (mean over folds) vs paper", knn[key]["mean"], target) for key, target in PAPER.items()}
    print("linear probe (relation vs hard negative), mean over folds:")
    for name, table in summary["probe"].items():
        print(f"  {name:9s} P {table['precision']['mean']:.3f} R {table['recall']['mean']:.3f} F1 {table['f1']['mean']:.3f}")
    if "clgs_accuracy" in summary:
        print(f"CLGS graph identification accuracy: {summary['clgs_accuracy']['mean']:.3f} ± {summary['clgs_accuracy']['std']:.3f} "
              f"({summary.get('clgs_unscored', 0)} test sentences without a valid hard negative left out)")
    table = knn_table(summary, len(args.folds))
    print(table)
    write_result(args.name, {
        "model": args.model,
        "folds": args.folds,
        "limit": args.limit,
        "training": {"epochs": None if args.max_steps else args.epochs, "max_steps": args.max_steps,
                     "batch_size": args.batch_size, "lr": args.lr, "seconds": train_seconds},
        "clgs_accuracy": summary.get("clgs_accuracy"),
        "clgs_unscored_sentences": summary.get("clgs_unscored"),
        "linear_probe": summary["probe"],
        "knn": {key: knn[key] for key in ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1", "k_ner", "k_re")},
        "knn_frozen": {key: summary["knn_baseline"][key] for key in ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1", "k_ner", "k_re")},
        "knn_trained_minus_frozen": summary["knn_gain"],
        "table_markdown": table,
        "paper_charbert_medical": PAPER,
        "vs_paper": checks,
        "per_fold": [{k: v for k, v in fold.items()} for fold in summary["per_fold"]],
        "eval_seconds": round(eval_seconds, 1),
        "total_seconds": round(time.perf_counter() - started, 1),
        "plots": summary.get("plots"),
        "mlflow_run_id": summary.get("mlflow_run_id"),
        "workdir": str(workdir),
    })


if __name__ == "__main__":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main()
