"""The shipped OpenOffice recipe (configs/pipelines/openoffice_duplicates.yaml) against the sentence-transformers
trainer, with one ablation row per ingredient, all in one run.

Pair files come from `lmp data pairs` (the dataset's own group split): the recipe trains on train (1,465 pairs),
its choices were made on dev (536 pairs: `--split dev` scores every row there), and the rows are reported on
test (498 pairs; each duplicate ranked against the whole corpus, its relevant reports the rest of its group,
as in bench/openoffice_retrieval.py). Rows:
  - zero-shot MiniLM;
  - the sentence-transformers trainer: MultipleNegativesRankingLoss (scale 20), one epoch, batch 32, lr 2e-5,
    10% warm-up, max length 128 (bench/openoffice_retrieval.py's shared budget);
  - the recipe: a `mine` stage (the start model's hard negatives, group members never taken) and a bi-encoder
    stage (one mined negative per pair, group-aware batches), both under bf16 autocast, at the peer's budget otherwise;
  - with `--peer-bf16`, the peer under its own bf16 autocast too (the bar stays its default, fp32);
  - the recipe in fp32, the recipe without each ingredient in turn, with batch 128 through GradCache (mini-batches of 32), and
    distilled from a cross-encoder trained on the same mined pairs; on request (`--rows`), with the symmetric loss.
Quality: R@1/10/20, MRR@10, nDCG@10, MAP@100 with 95% bootstrap intervals over the split's queries; each row minus
the peer and each ablation minus the recipe as paired bootstrap intervals. Time, against the peer's `trainer.train()`: the
recipe's own work (mining's encoding plus the training steps) and the whole pipeline's wall time (Ray start-up,
validation before and after training, and export included); the target is at most 2x the peer.

    python bench/openoffice_recipe.py [--data ../shared/data] [--split dev|test] [--rows recipe no_mined ...] [--toy]

Writes bench/results/openoffice_recipe.json (openoffice_recipe_dev.json with --split dev, *_toy.json with --toy).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, training_steps_seconds, write_result
from openoffice_retrieval import BUDGET, METRICS, TestSet, interval, paired, table, train_peer

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "pipelines" / "openoffice_duplicates.yaml"
Spec = dict[str, Any]
PEER_BF16 = "sentence-transformers trainer (bf16)"


# -- the rows: the recipe and its ablations, as edits of the pipeline spec --------------------------------
def _train_stage(spec: Spec) -> Spec:
    return next(stage for stage in spec["stages"] if "run" in stage)["run"]


def _without_mining(spec: Spec) -> None:
    spec["stages"] = [stage for stage in spec["stages"] if "mine" not in stage]
    run = _train_stage(spec)
    run["data"]["train_paths"] = spec["_files"]["train"]
    run["data"]["hard_negative_field"] = None
    run["objective"]["max_hard_negatives"] = 0


def _set(path: str, value: Any) -> Callable[[Spec], None]:
    def edit(spec: Spec) -> None:
        section = _train_stage(spec)
        *parents, leaf = path.split(".")
        for key in parents:
            section = section.setdefault(key, {})
        section[leaf] = value
    return edit


def _fp32(spec: Spec) -> None:
    """Mining and training without bf16 autocast."""
    _set("optim.precision", "fp32")(spec)
    for stage in spec["stages"]:
        if "mine" in stage:
            stage["mine"]["precision"] = "fp32"


def _gradcache_128(spec: Spec) -> None:
    _set("optim.batch_size", 128)(spec)
    _set("objective.mini_batch_size", 32)(spec)


def _distilled(spec: Spec) -> None:
    """A cross-encoder teacher trained on the same mined pairs (one epoch), then the bi-encoder learns its
    margins (MarginMSE) on top of the in-batch loss."""
    run = _train_stage(spec)
    teacher = {"name": "teacher", "init_from": "default", "run": {
        "model": {"max_seq_length": 128},
        "data": {"train_paths": ["stage:negatives"], "hard_negative_field": "hard_negatives", "validation_fraction": 0.0},
        "objective": {"name": "cross_encoder", "negatives_per_positive": 1, "use_hard_negatives": True},
        "optim": {"lr": 2e-5, "batch_size": 16, "epochs": 1, "warmup_ratio": 0.1, "max_steps": run["optim"].get("max_steps")},
        "scaling": run["scaling"], "checkpoint": {"every_n_steps": 10_000},
        "tracking": {"log_every_n_steps": 5, "register_model": False}}}
    spec["stages"].insert(1, teacher)
    run["objective"] = {"name": "biencoder_distill", "teacher": "stage:teacher", "loss": "margin_mse", "max_hard_negatives": 1,
                        "in_batch_weight": 1.0, "student_temperature": run["objective"]["temperature"],
                        "teacher_max_seq_length": 128}


ROWS: dict[str, tuple[str, Optional[Callable[[Spec], None]]]] = {
    "recipe": ("recipe", None),
    "fp32": ("recipe in fp32", _fp32),
    "no_mined": ("recipe without mined negatives", _without_mining),
    "no_group": ("recipe without group-aware batches", _set("objective.group_aware_batches", False)),
    "symmetric": ("recipe with the symmetric loss", _set("objective.symmetric", True)),
    "length_grouped": ("recipe with length-grouped batches", _set("data.length_grouping", {"buffer_batches": 64})),
    "gradcache_128": ("recipe at batch 128 through GradCache", _gradcache_128),
    "distilled": ("recipe + distillation from a cross-encoder", _distilled),
}
DEFAULT_ROWS = ["recipe", "fp32", "no_mined", "no_group", "gradcache_128", "distilled"]


def pipeline_spec(files: dict[str, Path], out: Path, tracking_uri: str, row: str, max_steps: Optional[int],
                  max_distractors: Optional[int]) -> Spec:
    """The shipped recipe with this bench's files, storage and tracking, edited for `row`."""
    from lmplatform.config import read_yaml

    spec = read_yaml(RECIPE)
    spec["_files"] = {"train": [str(files["train"])]}
    spec["name"] = f"openoffice_{row}"
    spec["storage_path"] = str(out / "pipelines")
    spec["tracking"] = {"tracking_uri": tracking_uri, "experiment": "openoffice-recipe-bench"}
    corpus = str(files["corpus"])
    for stage in spec["stages"]:
        if "mine" in stage:
            stage["mine"]["pairs"]["train_paths"] = [str(files["train"])]
            stage["mine"]["distractors"].update(paths=[corpus], max_documents=max_distractors)
        if "run" in stage:
            run = stage["run"]
            run["data"]["validation_paths"] = [str(files["dev"])]
            run["retrieval_validation"]["distractors"]["paths"] = [corpus]
            if max_distractors:
                run["retrieval_validation"]["distractors"]["max_documents"] = max_distractors
            run["tracking"]["registered_model"] = f"openoffice-{row.replace('_', '-')}"
            run["checkpoint"]["every_n_steps"] = 10_000
            if max_steps:
                run["optim"]["max_steps"] = max_steps
    edit = ROWS[row][1]
    if edit is not None:
        edit(spec)
    spec.pop("_files")
    return spec


def run_recipe(spec: Spec, out: Path) -> dict[str, Any]:
    """Run the pipeline; its final model, wall time, and the training steps' own time (from the loop's
    throughput windows in MLflow, as bench/openoffice_retrieval.py measures ours)."""
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline import pipeline_config_from_dict, run_pipeline

    cfg = pipeline_config_from_dict(spec, out)
    start = time.perf_counter()
    result = run_pipeline(cfg)
    wall = time.perf_counter() - start
    final = result.state.stages[cfg.stages[-1].name]
    client = MlflowClient(result.tracking_uri)
    batch = int(client.get_run(final.mlflow_run_id).data.params["optim.batch_size"])
    steps, training_seconds = training_steps_seconds(result.tracking_uri, final.mlflow_run_id, batch)
    mined = next((result.state.stages[s.name] for s in cfg.stages if s.mine is not None), None)
    mine_seconds = None
    if mined is not None:
        mine_seconds = client.get_run(mined.mlflow_run_id).data.metrics.get("mine/encode_seconds")
    return {"model": final.model_dir, "pipeline_seconds": wall, "steps": steps, "seconds_per_step": training_seconds / steps,
            "training_seconds": training_seconds, "mine_encode_seconds": mine_seconds,
            "mlflow_run_id": final.mlflow_run_id}


def peer_timing(peer: dict[str, Any]) -> dict[str, Any]:
    """The timing row of a `train_peer` result."""
    return {"training_seconds": peer["train_seconds"], "steps": peer["steps"], "seconds_per_step": peer["seconds_per_step"]}


# -- data ---------------------------------------------------------------------------------------------------
def pair_files(data: Path, out: Path, limit: Optional[int]) -> dict[str, Path]:
    """train / dev / test pair files (query, document, group) as `lmp data pairs` writes them, and the corpus."""
    from lmplatform.evaluation import RetrievalDataset, write_split_pairs

    oo = data / "duplicate_bug_reports" / "openoffice"
    dataset = RetrievalDataset(name="openoffice", corpus=str(oo / "corpus.jsonl"), relations=str(oo / "pairs.jsonl"))
    written = write_split_pairs(dataset, out, ["title", "description"], limit=limit)
    return {"corpus": oo / "corpus.jsonl"} | {split: pairs.path for split, pairs in written.items()}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "openoffice_recipe")
    parser.add_argument("--split", choices=["dev", "test"], default="test",
                        help="Where the rows are scored: dev is where the recipe's choices were made, test reports them.")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=DEFAULT_ROWS,
                        help="Recipe rows to train (default: all but 'symmetric').")
    parser.add_argument("--peer-bf16", action="store_true",
                        help="Also train the peer under its bf16 autocast "
                             "(the recipe trains in bf16; the bar is its default fp32).")
    parser.add_argument("--toy", action="store_true", help="A few pairs and steps: checks the script, measures nothing.")
    args = parser.parse_args(argv)
    if "recipe" not in args.rows:
        parser.error("--rows must include recipe: the ablations are read against it")

    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    args.out.mkdir(parents=True, exist_ok=True)
    tracking_uri = f"sqlite:///{(args.out / 'mlflow.db').resolve()}"
    limit, max_steps, max_distractors = (40, 3, 200) if args.toy else (None, None, None)
    files = pair_files(args.data, args.out / "pairs", limit)
    scored = TestSet(files, max_distractors, split=args.split)
    print(f"[bench] {args.split}: {scored.rset.summary()}", flush=True)

    scores: dict[str, dict[str, Any]] = {}  # row -> per-query metrics on the split
    timing: dict[str, dict[str, Any]] = {}

    def score(name: str, model: str) -> None:
        scores[name] = scored.score(model, BUDGET["max_seq_length"])["per_query"]

    score("MiniLM zero-shot", "default")
    peer = train_peer(files, args.out, max_steps)
    timing["sentence-transformers trainer"] = peer_timing(peer)
    score("sentence-transformers trainer", peer["model"])
    if args.peer_bf16:
        peer_bf16 = train_peer(files, args.out, max_steps, bf16=True)
        timing[PEER_BF16] = peer_timing(peer_bf16)
        score(PEER_BF16, peer_bf16["model"])
    for row in args.rows:
        name = ROWS[row][0]
        result = run_recipe(pipeline_spec(files, args.out, tracking_uri, row, max_steps, max_distractors), args.out)
        timing[name] = result
        score(name, result["model"])
        print(f"[bench] {name}: trained in {result['pipeline_seconds']:.0f} s "
              f"(steps {result['training_seconds']:.0f} s)", flush=True)

    peer_name, recipe_name = "sentence-transformers trainer", ROWS["recipe"][0]
    rows = {name: {"metrics": {m: interval(s[m]) for m in METRICS},
                   "seconds_per_step": timing.get(name, {}).get("seconds_per_step")}
            for name, s in scores.items()}
    peer_seconds = peer["train_seconds"]
    payload: dict[str, Any] = {
        "budget": BUDGET, "recipe": str(RECIPE.relative_to(ROOT)), "split": args.split, "scored_set": scored.rset.counts,
        "rows": rows, "timing": timing,
        "minus_peer": {name: {m: paired(s[m], scores[peer_name][m]) for m in METRICS}
                       for name, s in scores.items() if name != peer_name},
        "minus_recipe": {name: {m: paired(s[m], scores[recipe_name][m]) for m in METRICS}
                         for name, s in scores.items() if name not in (peer_name, recipe_name, PEER_BF16, "MiniLM zero-shot")},
        "recipe_wall_over_peer": timing[recipe_name]["pipeline_seconds"] / peer_seconds,
        # mining's encoding plus the training steps: the recipe's own work, without start-up and validation
        "recipe_training_over_peer": (timing[recipe_name]["training_seconds"]
                                      + (timing[recipe_name]["mine_encode_seconds"] or 0.0)) / peer_seconds,
    }
    if PEER_BF16 in scores:
        payload["recipe_minus_peer_bf16"] = {m: paired(scores[recipe_name][m], scores[PEER_BF16][m]) for m in METRICS}
    gain = payload["minus_peer"][recipe_name]
    payload["targets"] = {
        "recipe_beats_peer_mrr_at_10": gain["ir_mrr_at_10"][1] > 0,
        "recipe_beats_peer_recall_at_10": gain["ir_recall_at_10"][1] > 0,
        "recipe_wall_at_most_2x_peer": payload["recipe_wall_over_peer"] <= 2.0,
    }
    print(table(rows), flush=True)
    for name, diff in payload["minus_peer"].items():
        print(f"[bench] {name} - peer: " + ", ".join(f"{m[3:]} {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                                                     for m, (d, lo, hi) in diff.items()
                                                     if m in ("ir_recall_at_10", "ir_mrr_at_10")))
    print(f"[bench] recipe wall {timing[recipe_name]['pipeline_seconds']:.0f} s vs peer {peer_seconds:.0f} s "
          f"({payload['recipe_wall_over_peer']:.2f}x); targets {payload['targets']}", flush=True)
    write_result("openoffice_recipe" + ("_dev" if args.split == "dev" else "") + ("_toy" if args.toy else ""), payload)


if __name__ == "__main__":
    main()
