"""OpenOffice duplicate retrieval: our bi-encoder against the sentence-transformers trainer, then a τ study
whose winner must pass the champion gate. Train on the train split, select on dev, report on test.

Splits (the dataset's own group split, no report in two splits): train (1,465 pairs) trains; dev is cut in
two by duplicate group: `dev_select` scores the trials (val_ir_*), `dev_confirm` is the champion gate's
held-out confirmation set; test (498 queries) is only ever reported. Every query is ranked against the whole
corpus (4,548 reports, the query itself excluded); a query's relevant reports are the rest of its group.

1. Rows at the same budget (one epoch, batch 32, lr 2e-5, 10% warm-up, scale 20 / τ = 0.05, max length 128):
   zero-shot MiniLM; our bi-encoder (Ray Train, 1 worker x 2 CPUs); the sentence-transformers trainer
   (`SentenceTransformerTrainer`, MultipleNegativesRankingLoss) in the same run. R@1/10/20, MRR@10, nDCG@10
   and MAP@100 with 95% bootstrap intervals over test queries, paired gains, and seconds per step of each.
2. A Ray Tune + Optuna study of τ (`--trials`) targeting val_ir_ndcg_at_10 on dev_select; the best trial
   goes through the gate (paired bootstrap on dev_confirm against the model it would replace: for a first
   champion, zero-shot MiniLM; forgetting probes on STS-B dev and STS-B/SICK dev paraphrases); the
   registered winner is then scored on test against zero-shot.

    python bench/openoffice_retrieval.py [--data ../shared/data] [--trials 5] [--skip-study] [--toy]

Writes bench/results/openoffice_retrieval.json (openoffice_retrieval_toy.json with --toy).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("ir_recall_at_1", "ir_recall_at_10", "ir_recall_at_20", "ir_mrr_at_10", "ir_ndcg_at_10", "ir_map_at_100")
BUDGET = {"batch_size": 32, "lr": 2e-5, "warmup_ratio": 0.1, "temperature": 0.05, "max_seq_length": 128, "epochs": 1}


# -- data ----------------------------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def report_text(report: dict[str, Any]) -> str:
    """Title and description joined as the distractor reader joins `fields: [title, description]`."""
    return ". ".join(str(report[f]).strip() for f in ("title", "description")
                     if report.get(f) not in (None, "") and str(report[f]).strip())


def split_files(data: Path, out: Path, limit: Optional[int]) -> dict[str, Path]:
    """train / dev_select / dev_confirm / test pair files; dev is halved by duplicate group (its master)."""
    oo = data / "duplicate_bug_reports" / "openoffice"
    reports = {r["id"]: r for r in _jsonl(oo / "corpus.jsonl")}
    rows: dict[str, list[dict[str, Any]]] = {"train": [], "dev_select": [], "dev_confirm": [], "test": []}
    for pair in _jsonl(oo / "pairs.jsonl"):
        query, document = reports.get(pair["duplicate_id"]), reports.get(pair["master_id"])
        if query is None or document is None or not report_text(query) or not report_text(document):
            continue
        split = pair["split"]
        if split == "dev":
            half = int(hashlib.md5(pair["master_id"].encode()).hexdigest(), 16) % 2
            split = "dev_select" if half == 0 else "dev_confirm"
        rows[split].append({"id": f"{pair['duplicate_id']}-{pair['master_id']}", "query": report_text(query),
                            "document": report_text(document)})
    if limit:
        rows = {k: v[:limit] for k, v in rows.items()}
    files = {name: _write(out / f"{name}.jsonl", r) for name, r in rows.items()}
    files["corpus"] = oo / "corpus.jsonl"
    return files


def retrieval_config(files: dict[str, Path], split_file: str, max_distractors: Optional[int] = None) -> dict[str, Any]:
    return {"pairs": {"train_paths": [str(files[split_file])], "validation_fraction": 0.0}, "split": "all",
            "distractors": {"paths": [str(files["corpus"])], "fields": ["title", "description"],
                            "max_documents": max_distractors},
            "recall_ks": [1, 10, 20], "mrr_k": 10, "ndcg_k": 10, "map_k": 100, "batch_size": 64}


# -- scoring -------------------------------------------------------------------------------------------
class TestSet:
    """The test split (or another `split` of `files`) against the whole corpus, built once; scores any encoder
    folder per query."""

    def __init__(self, files: dict[str, Path], max_distractors: Optional[int] = None, split: str = "test"):
        from lmplatform.evaluation import build_retrieval_set
        from lmplatform.retrieval import RetrievalValidationConfig

        self.cfg = RetrievalValidationConfig.model_validate(retrieval_config(files, split, max_distractors))
        self.rset = build_retrieval_set(self.cfg)

    def score(self, model: str, max_seq_length: int) -> dict[str, Any]:
        import numpy as np

        from lmplatform import Encoder
        from lmplatform.evaluation import evaluate_model

        start = time.perf_counter()
        per_query = evaluate_model(Encoder.from_pretrained(model, max_seq_length=max_seq_length), self.rset, self.cfg)
        return {"per_query": {k: np.asarray(v) for k, v in per_query.items()}, "seconds": time.perf_counter() - start}


def interval(values: Any, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): 95% percentile bootstrap over queries."""
    import numpy as np
    from scipy.stats import bootstrap

    values = np.asarray(values, dtype=np.float64)
    if np.all(values == values[0]):
        return float(values[0]), float(values[0]), float(values[0])
    ci = bootstrap((values,), np.mean, n_resamples=2000, method="percentile",
                   random_state=np.random.default_rng(seed)).confidence_interval
    return float(values.mean()), float(ci.low), float(ci.high)


def paired(a: Any, b: Any) -> tuple[float, float, float]:
    from lmplatform.metrics import paired_bootstrap

    return paired_bootstrap(a, b, 0.95, 2000, 0)


# -- the two trainers ----------------------------------------------------------------------------------
class PlannedBatches:
    """A batch sampler that hands the peer's trainer our planned batches, in our order (the trainer calls
    `set_epoch`; the plan already differs per epoch)."""

    def __init__(self, batches: list[list[int]]):
        self.batches = batches

    def set_epoch(self, epoch: int) -> None:
        pass

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def train_peer(files: dict[str, Path], out: Path, max_steps: Optional[int],
               planned: Optional[tuple[list[dict[str, str]], list[list[int]]]] = None, bf16: bool = False) -> dict[str, Any]:
    """sentence-transformers' own trainer: MultipleNegativesRankingLoss (scale 20) at the shared budget; with
    `planned` (pairs, batches of their indices), it reads exactly those batches in that order; with `bf16`, under
    its bf16 autocast (the Trainer's `bf16=True`, which runs on CPU too)."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from lmplatform.models import packaged_model_path

    torch.set_num_threads(2)
    pairs = planned[0] if planned else _jsonl(files["train"])
    dataset = Dataset.from_dict({"anchor": [p["query"] for p in pairs], "positive": [p["document"] for p in pairs]})
    model = SentenceTransformer(str(packaged_model_path()), device="cpu")
    model.max_seq_length = BUDGET["max_seq_length"]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "peer-checkpoints"), num_train_epochs=BUDGET["epochs"], max_steps=max_steps or -1,
        per_device_train_batch_size=BUDGET["batch_size"], learning_rate=BUDGET["lr"],
        warmup_steps=BUDGET["warmup_ratio"],  # a float below 1 is a share of the steps (transformers 5)
        save_strategy="no", logging_steps=10, report_to="none", seed=42, dataloader_drop_last=False, use_cpu=True, bf16=bf16,
        **({"batch_sampler": lambda dataset, **kwargs: PlannedBatches(planned[1])} if planned else {}),
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset,
                                         loss=MultipleNegativesRankingLoss(model, scale=1 / BUDGET["temperature"]))
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    folder = out / ("peer-model-bf16" if bf16 else "peer-model")
    model.save(str(folder))
    return {"model": str(folder), "steps": int(output.global_step), "train_seconds": seconds,
            "seconds_per_step": seconds / max(int(output.global_step), 1)}


def our_config(files: dict[str, Path], out: Path, tracking_uri: str, max_steps: Optional[int],
               selection_distractors: Optional[int] = None, group_aware: bool = False) -> dict[str, Any]:
    """Our run at the shared budget; with `selection_distractors`, also the study's selection metric
    (val_ir_*: dev_select against a sample of that many corpus reports); `group_aware`: batches planned on
    the driver (`objective.group_aware_batches`), whose plan the peer can be handed."""
    cfg: dict[str, Any] = {
        "model": {"name_or_path": "default", "max_seq_length": BUDGET["max_seq_length"]},
        "data": {"train_paths": [str(files["train"])], "validation_paths": [str(files["dev_select"])]},
        "objective": {"name": "biencoder", "temperature": BUDGET["temperature"], "learnable_temperature": False,
                      "symmetric": False, "max_hard_negatives": 0, "group_aware_batches": group_aware},
        "optim": {"lr": BUDGET["lr"], "batch_size": BUDGET["batch_size"], "warmup_ratio": BUDGET["warmup_ratio"],
                  "epochs": BUDGET["epochs"], "max_steps": max_steps},
        "scaling": {"num_workers": 1, "cpus_per_worker": 2},
        "checkpoint": {"every_n_steps": 10_000, "storage_path": str(out / "runs")},
        "tracking": {"tracking_uri": tracking_uri, "experiment": "openoffice-bench", "log_every_n_steps": 5,
                     "registered_model": "openoffice-biencoder"},
    }
    if selection_distractors:
        cfg["retrieval_validation"] = retrieval_config(files, "dev_select", selection_distractors)
    return cfg


def train_ours(files: dict[str, Path], out: Path, tracking_uri: str, max_steps: Optional[int],
               group_aware: bool = False) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from lmplatform.jobs import run_training
    from lmplatform.objectives import load_run_config

    cfg = load_run_config(None, base=our_config(files, out, tracking_uri, max_steps, group_aware=group_aware))
    start = time.perf_counter()
    result = run_training(cfg)
    seconds = time.perf_counter() - start
    history = MlflowClient(tracking_uri).get_metric_history(result.mlflow_run_id, "samples_per_s")
    steps = int(result.metrics.get("step", 0))
    # The loop's own throughput windows: training steps only, no validation, no Ray start-up.
    samples_per_s = sum(m.value for m in history) / len(history)
    return {"model": str(result.model_dir), "steps": steps, "wall_seconds_with_startup_and_validation": seconds,
            "seconds_per_step": BUDGET["batch_size"] / samples_per_s, "mlflow_run_id": result.mlflow_run_id}


def our_plan(files: dict[str, Path], out: Path, tracking_uri: str,
             max_steps: Optional[int]) -> tuple[list[dict[str, str]], list[list[int]]]:
    """The training pairs as our reader keeps them and the batches our driver plans for the group-aware run."""
    from lmplatform.data import read_pairs
    from lmplatform.objectives import load_run_config, plan_pairs

    cfg = load_run_config(None, base=our_config(files, out, tracking_uri, max_steps, group_aware=True))
    pairs = read_pairs(cfg.data)
    batches = [batch for order in plan_pairs(pairs, cfg)[1] for batch in order.batches]
    return [{"query": p.query, "document": p.document} for p in pairs.train], batches[:max_steps]


# -- the study -----------------------------------------------------------------------------------------
def general_pack(data: Path) -> dict[str, Any]:
    """The gate's forgetting probes on public data: STS-B dev Spearman, paraphrase retrieval on STS-B and SICK dev."""
    stsb_dev = {"path": str(data / "stsbenchmark" / "sts-dev.jsonl")}
    sick_dev = {"path": str(data / "sick" / "sick.jsonl"), "where": {"split": "dev"}, "score_field": "relatedness_score",
                "scale": [1.0, 5.0]}
    return {"sts": stsb_dev, "paraphrase": [stsb_dev, sick_dev], "tolerance": 0.01}


def write_study(files: dict[str, Path], out: Path, tracking_uri: str, trials: int, max_steps: Optional[int],
                confirm_distractors: Optional[int], data: Path) -> Path:
    import yaml

    base = our_config(files, out, tracking_uri, max_steps, selection_distractors=confirm_distractors or 2000)
    base_path = out / "study_base.yaml"
    base_path.write_text(yaml.safe_dump(base, sort_keys=False))
    space = {
        "study": "openoffice-temperature", "trial": "train", "requires": ["biencoder"], "base_config": str(base_path),
        "parameters": {"objective.temperature": {"distribution": "loguniform", "low": 0.02, "high": 0.2}},
        "metric": "val_ir_ndcg_at_10", "mode": "max", "num_samples": trials, "max_concurrent": 1,
        "scheduler": {"name": "fifo"}, "resources": {"cpu": 0}, "storage_path": str(out / "tune"),
        "champion": {"registered_model": "openoffice-retriever",
                     "confirm": retrieval_config(files, "dev_confirm", confirm_distractors), "general": general_pack(data)},
    }
    path = out / "study_space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def run_study_part(files: dict[str, Path], out: Path, tracking_uri: str, trials: int, max_steps: Optional[int],
                   test: TestSet, zero_shot: dict[str, Any], max_distractors: Optional[int], data: Path) -> dict[str, Any]:
    from lmplatform.models import download_model
    from lmplatform.tune import run_study

    start = time.perf_counter()
    study = run_study(write_study(files, out, tracking_uri, trials, max_steps, max_distractors, data), tracking_uri=tracking_uri)
    seconds = time.perf_counter() - start
    trial_rows = [{"trial": r["trial_id"], "temperature": r["params"].get("objective.temperature"),
                   "val_ir_ndcg_at_10": r["metrics"].get("val_ir_ndcg_at_10"),
                   "val_ir_mrr_at_10": r["metrics"].get("val_ir_mrr_at_10"), "status": r["status"]}
                  for r in study.trials]
    decision = study.champion
    verdict = decision.verdict if decision else None
    result: dict[str, Any] = {
        "seconds": seconds, "trials": trial_rows, "best_trial": study.best_trial_id, "best_params": study.best_params,
        "gate": {"moved": decision.moved, "reason": decision.reason, "version": decision.version,
                 **({"comparison": verdict.comparison.__dict__} if verdict and verdict.comparison else {}),
                 "probes": [p.__dict__ for p in verdict.probes] if verdict else []} if decision else None,
    }
    if decision is not None:  # the registered winner, scored on test whatever the gate decided
        folder = download_model(f"models:/{decision.registered_model}/{decision.version}", tracking_uri)
        winner = test.score(str(folder), BUDGET["max_seq_length"])
        result["winner_test"] = {m: interval(winner["per_query"][m]) for m in METRICS}
        result["winner_vs_zero_shot_test"] = {m: paired(winner["per_query"][m], zero_shot["per_query"][m]) for m in METRICS}
    return result


# -- report --------------------------------------------------------------------------------------------
def table(rows: dict[str, dict[str, Any]]) -> str:
    head = ["model", "R@1", "R@10", "R@20", "MRR@10", "nDCG@10", "MAP@100", "s/step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        cells = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in (row["metrics"][k] for k in METRICS)]
        step = row.get("seconds_per_step")
        lines.append("| " + " | ".join([name, *cells, f"{step:.2f}" if step else "–"]) + " |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "openoffice_retrieval")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--skip-study", action="store_true")
    parser.add_argument("--speed-only", action="store_true",
                        help="Only the two trainings back to back, for their seconds per step (on an otherwise idle "
                             "machine), on identical batches: ours planned group-aware on the driver, the peer handed that plan.")
    parser.add_argument("--toy", action="store_true", help="A few pairs and steps: checks the script, measures nothing.")
    args = parser.parse_args(argv)

    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    args.out.mkdir(parents=True, exist_ok=True)
    tracking_uri = f"sqlite:///{(args.out / 'mlflow.db').resolve()}"
    limit, max_steps, max_distractors = (40, 3, 200) if args.toy else (None, None, None)
    files = split_files(args.data, args.out, limit)
    counts = {name: sum(1 for _ in open(path, encoding="utf-8")) for name, path in files.items()}
    print(f"[bench] pairs per split: {counts}", flush=True)

    if args.speed_only:
        peer = train_peer(files, args.out, max_steps, planned=our_plan(files, args.out, tracking_uri, max_steps))
        ours = train_ours(files, args.out, tracking_uri, max_steps, group_aware=True)
        ratio = peer["seconds_per_step"] / ours["seconds_per_step"]
        print(f"[bench] speed: ours {ours['seconds_per_step']:.2f} s/step, peer {peer['seconds_per_step']:.2f} s/step: "
              f"{ratio:.2f}x the peer's throughput", flush=True)
        write_result("openoffice_retrieval_speed" + ("_toy" if args.toy else ""), {"budget": BUDGET, "peer": peer, "ours": ours,
                                                    "speed_ratio_ours_over_peer": ratio})
        return
    test = TestSet(files, max_distractors)
    print(f"[bench] test: {test.rset.summary()}", flush=True)
    zero_shot = test.score("default", BUDGET["max_seq_length"])
    peer = train_peer(files, args.out, max_steps)
    peer_scores = test.score(peer["model"], BUDGET["max_seq_length"])
    ours = train_ours(files, args.out, tracking_uri, max_steps)
    our_scores = test.score(ours["model"], BUDGET["max_seq_length"])

    rows = {
        "MiniLM zero-shot": {"metrics": {m: interval(zero_shot["per_query"][m]) for m in METRICS}},
        "sentence-transformers trainer": {"metrics": {m: interval(peer_scores["per_query"][m]) for m in METRICS},
                                          "seconds_per_step": peer["seconds_per_step"]},
        "lmplatform bi-encoder": {"metrics": {m: interval(our_scores["per_query"][m]) for m in METRICS},
                                  "seconds_per_step": ours["seconds_per_step"]},
    }
    payload: dict[str, Any] = {
        "budget": BUDGET, "pairs": counts, "test_set": test.rset.counts, "rows": rows, "peer": peer, "ours": ours,
        "ours_minus_peer": {m: paired(our_scores["per_query"][m], peer_scores["per_query"][m]) for m in METRICS},
        "ours_minus_zero_shot": {m: paired(our_scores["per_query"][m], zero_shot["per_query"][m]) for m in METRICS},
        "speed_ratio_ours_over_peer": peer["seconds_per_step"] / ours["seconds_per_step"],
    }
    print(table(rows), flush=True)
    print(f"[bench] speed: ours {ours['seconds_per_step']:.2f} s/step, peer {peer['seconds_per_step']:.2f} s/step: "
          f"{payload['speed_ratio_ours_over_peer']:.2f}x the peer's throughput", flush=True)
    if not args.skip_study:
        payload["study"] = run_study_part(files, args.out, tracking_uri, args.trials, max_steps, test, zero_shot,
                                          max_distractors, args.data)
        print(json.dumps({k: v for k, v in payload["study"].items() if k != "trials"}, indent=1, default=str), flush=True)
    write_result("openoffice_retrieval_toy" if args.toy else "openoffice_retrieval", payload)


if __name__ == "__main__":
    main()
