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
    python bench/graph_ade.py --in-process --device cuda   # no Ray: training and evaluation in this process (a GPU without Ray)
    python bench/graph_ade.py --combine bench/results/graph_ade_fold*.json   # one table from folds run separately
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result

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


def train_fold(
    variant: str, fold: int, args: argparse.Namespace, workdir: Path, tracking_uri: Optional[str]
) -> tuple[Path, float]:
    from lmplatform.objectives import load_run_config

    overrides = [
        f"model.name_or_path={args.model}", f"data.train_paths={args.data}", f"objective.folds_file={args.folds_file}",
        f"objective.fold={fold}", f"objective.variant={variant}", f"optim.batch_size={args.batch_size}",
        f"optim.lr={args.lr}", f"scaling.cpus_per_worker={args.cpus}", f"checkpoint.storage_path={workdir / 'runs'}",
        "tracking.experiment=bench-graph-ade", "tracking.register_model=false",
        f"tracking.run_name=bench-{variant}-fold{fold}-{int(time.time())}",
    ]
    overrides += [f"tracking.tracking_uri={tracking_uri}"] if tracking_uri else []
    overrides += [f"optim.max_steps={args.max_steps}"] if args.max_steps else [f"optim.epochs={args.epochs}"]
    if args.gpu or args.device == "cuda":
        overrides.append("scaling.use_gpu=true")
    if args.limit:
        overrides.append(f"data.max_documents={args.limit}")
    if args.in_process:  # its reporter copies every checkpoint, optimizer state included; only the final one is read
        overrides.append("checkpoint.every_n_steps=1000000000")
    cfg = load_run_config(REPO / f"configs/graph_cl_{variant}.yaml", overrides)
    started = time.perf_counter()
    if args.in_process:
        from in_process import train_in_process

        model_dir = train_in_process(cfg, args.device, workdir / "runs" / f"{variant}-fold{fold}").model_dir
    else:
        from lmplatform.jobs import run_training

        model_dir = run_training(cfg).model_dir
    link = workdir / f"fold{fold}" / variant
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(model_dir)
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
    parser.add_argument("--in-process", action="store_true",
                        help="No Ray: train and evaluate in this process (for a GPU machine where Ray is not installed).")
    parser.add_argument("--device", default="cpu", help="With --in-process: cuda or cpu for training.")
    parser.add_argument("--workdir", default=None, help="Where runs and fold model links go (default: a temp folder).")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--no-tsne", action="store_true", help="Skip the t-SNE plots (drawn on the first fold).")
    parser.add_argument("--name", default="graph_ade")
    parser.add_argument("--combine", nargs="+", metavar="JSON", default=None,
                        help="Train nothing: one table from the per-fold rows of earlier runs' result files.")
    args = parser.parse_args()
    if args.toy:
        args.folds, args.limit, args.max_steps = TOY["folds"], TOY["limit"], TOY["max_steps"]
        args.name = f"{args.name}_toy"
    if len(args.folds) < 2:
        print(f"[bench] warning: {len(args.folds)} fold; the std over folds is 0 and says nothing", flush=True)

    if args.combine:
        combine(args.combine, args.name)
        return
    from lmplatform.evaluation import RelationEvalConfig, run_cross_validation
    from lmplatform.ray_runtime import ensure_ray

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-graph-ade-")).resolve()
    # in process, MLflow is optional: a GPU machine without Ray may lack it too
    tracking_uri = args.tracking_uri or (None if args.in_process else f"sqlite:///{workdir / 'mlruns.db'}")
    if not args.in_process:
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
        baseline_model=args.model, cpus_per_fold=os.cpu_count() if args.in_process else 1.0, tsne=not args.no_tsne,
    )
    eval_started = time.perf_counter()
    summary = run_cross_validation(cfg, workdir / "eval", tracking_uri, "bench-graph-ade", parallel=not args.in_process)
    training = {"device": args.device if args.in_process else ("cuda" if args.gpu else "cpu"), "in_process": args.in_process,
                "epochs": None if args.max_steps else args.epochs, "max_steps": args.max_steps,
                "batch_size": args.batch_size, "lr": args.lr, "seconds": train_seconds}
    report(args.name, summary, {
        "model": args.model, "limit": args.limit, "training": training,
        "eval_seconds": round(time.perf_counter() - eval_started, 1),
        "total_seconds": round(time.perf_counter() - started, 1),
        "plots": summary.get("plots"), "mlflow_run_id": summary.get("mlflow_run_id"), "workdir": str(workdir),
    })


def combine(paths: list[str], name: str) -> None:
    """One table from the per-fold rows of earlier runs (folds run as separate jobs or on other machines)."""
    from lmplatform.evaluation import summarize_folds

    runs = [json.loads(Path(path).read_text()) for path in paths]
    per_fold = [fold for run in runs for fold in run["per_fold"]]
    folds = [fold["fold"] for fold in per_fold]
    if len(set(folds)) != len(folds):
        raise SystemExit(f"--combine: fold(s) {sorted({f for f in folds if folds.count(f) > 1})} appear in more than one file")
    training = dict(runs[0]["training"])
    training["seconds"] = {key: value for run in runs for key, value in run["training"]["seconds"].items()}
    report(name, summarize_folds(per_fold) | {"per_fold": per_fold}, {
        "model": runs[0]["model"], "limit": runs[0]["limit"], "training": training, "combined_from": paths,
        "eval_seconds": round(sum(run["eval_seconds"] for run in runs), 1),
        "total_seconds": round(sum(run["total_seconds"] for run in runs), 1),
    })


def report(name: str, summary: dict, meta: dict) -> None:
    """Print the fold summary and write it, with `meta` (model, training, timings), as bench/results/<name>.json."""
    knn = summary["knn"]
    checks = {key: check(f"KNN {key} (mean over folds) vs paper", knn[key]["mean"], target) for key, target in PAPER.items()}
    print("linear probe (relation vs hard negative), mean over folds:")
    for probe, table in summary["probe"].items():
        print(f"  {probe:9s} P {table['precision']['mean']:.3f} R {table['recall']['mean']:.3f} F1 {table['f1']['mean']:.3f}")
    if "clgs_accuracy" in summary:
        print(f"CLGS graph identification accuracy: "
              f"{summary['clgs_accuracy']['mean']:.3f} ± {summary['clgs_accuracy']['std']:.3f} "
              f"({summary.get('clgs_unscored', 0)} test sentences without a valid hard negative left out)")
    folds = [fold["fold"] for fold in summary["per_fold"]]
    table = knn_table(summary, len(folds))
    print(table)
    keys = ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1", "k_ner", "k_re")
    write_result(name, meta | {
        "folds": folds,
        "clgs_accuracy": summary.get("clgs_accuracy"),
        "clgs_unscored_sentences": summary.get("clgs_unscored"),
        "linear_probe": summary["probe"],
        "knn": {key: knn[key] for key in keys},
        "knn_frozen": {key: summary["knn_baseline"][key] for key in keys},
        "knn_trained_minus_frozen": summary["knn_gain"],
        "table_markdown": table,
        "paper_charbert_medical": PAPER,
        "vs_paper": checks,
        "per_fold": summary["per_fold"],
    })

if __name__ == "__main__":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main()
