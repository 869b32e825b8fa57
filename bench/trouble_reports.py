"""The trouble-report study redone on public data: four training strategies for a duplicate-report retriever,
each run with several seeds.

Domain corpus: the bug-report texts of OpenOffice, Hadoop and SeaMonkey (title + description).
General task data: paraphrase pairs from STS-B train (score >= 4) and SICK train (entailment or
relatedness >= 4), in place of MS MARCO. Domain task data: OpenOffice duplicate pairs, train split (dev split
for the pair stages' validation). Each strategy is a pipeline built from the presets in configs/pipelines/
(each stage a Ray Train run under one MLflow parent run):

  1. domain adaptation  bi-encoder on OpenOffice train pairs (from MiniLM) -> MLM on the domain corpus
  2. sequential         MLM on the domain corpus -> bi-encoder on OpenOffice train pairs
  3. multi-stage        MLM domain -> bi-encoder on general pairs -> bi-encoder on OpenOffice train pairs
  4. multi-stage + EWC  as 3, both pair stages with EWC against the domain model (Fisher of the MLM loss
                        on the domain corpus, computed once per seed and shared by both stages)

MLM starts from a warmed head: the packaged MiniLM has none, so configs/mlm_head_warmup.yaml first trains the
head alone (encoder frozen) on general sentences, once for all seeds. Per seed (optim.seed of every stage) the
MLM domain stage of 2-4 is identical, so it runs once (its own one-stage pipeline) and 2-4 start from its model
folder (`init_from: <folder>`, `ewc.anchor_model: <folder>`). Pair stages run whole epochs (`--pair-epochs`).

Reported per strategy as mean ± std over the seeds, with the packaged MiniLM (zero-shot) and BM25 as reference:
- R@1/10/20, MRR@10 and nDCG@10 on OpenOffice test-split duplicate retrieval over the full corpus (4,548
  reports minus the query; relevant = the rest of the query's duplicate group);
- old-domain MLM loss on a held-out sample of the domain corpus (the hash split the MLM stage did not train
  on, fixed masks), read through the domain model's warmed-then-trained head: after the domain MLM stage
  ("before"), and after the later stages without and with EWC;
- continual-learning metrics of the multi-stage strategies (3, 4), whose two stages line up with two tasks:
  R[stage][task] is MRR@10 of general paraphrase retrieval (STS-B dev and SICK dev paraphrase pairs, each
  sentence ranked against the pairs' other sentences) and of OpenOffice dev retrieval (dev duplicates against
  their reports and sampled corpus distractors), scored on the start model and after every stage; A, BWT,
  FWT and REM as in lmplatform.metrics.continual;
- GLUE SST-2 accuracy and CoLA Matthews correlation (dev) of a logistic-regression probe on the frozen
  mean-pooled embeddings, for the base model and each final model;
- wall-clock seconds of every stage.

    python bench/trouble_reports.py            # full size: 3 seeds, one epoch per pair stage (about 2 h on 2 cores)
    python bench/trouble_reports.py --toy      # every stage at 2 steps on small samples, 2 seeds: about 15 minutes

Outputs go to --out (data files, the pipeline YAMLs actually run, Fisher, MLflow sqlite, Ray Train
storage); the table to bench/results/trouble_reports.json (trouble_reports_toy.json for --toy).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "configs" / "pipelines"
DOMAIN_SOURCES = ("openoffice", "hadoop", "seamonkey")
OLD_DOMAIN = "domain_reports"  # the evaluation label used by the presets
HEAD_WARMUP = ROOT / "configs" / "mlm_head_warmup.yaml"
RETRIEVAL_METRICS = ("recall@1", "recall@10", "recall@20", "mrr@10", "ndcg@10")
CONTINUAL_METRICS = ("A", "BWT", "FWT", "REM")
# The strategies whose pair stages (general, then task) line up with the R tasks (general, then OpenOffice dev).
TASK_MATRIX_STRATEGIES = ("multi_stage", "ms_ewc")
STRATEGIES = {
    "domain_adaptation": "1. domain adaptation (task model -> MLM domain)",
    "sequential": "2. sequential (MLM domain -> domain pairs)",
    "multi_stage": "3. multi-stage (MLM domain -> general -> domain pairs)",
    "ms_ewc": "4. multi-stage + EWC",
}

TOY = {"seeds": [42, 43], "head_steps": 2, "mlm_steps": 2, "task_steps": 2, "general_steps": 2, "mlm_batch_size": 4,
       "pair_batch_size": 4, "task_queries": 10, "task_distractors": 40, "general_eval_pairs": 40,
       "domain_docs": 300, "task_pairs": 120, "general_pairs": 120, "eval_corpus": 150, "limit_queries": 20,
       "glue_train": 200, "glue_dev": 200, "old_domain_texts": 24, "fisher_samples": 8}


# -- data -------------------------------------------------------------------

def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def report_text(report: dict[str, Any]) -> str:
    """Title + description, as the retrieval evaluation joins them (fields joined with '. ')."""
    return ". ".join(str(report[f]).strip() for f in ("title", "description") if str(report.get(f) or "").strip())


def _sample(rows: list[Any], limit: Optional[int], seed: int = 13) -> list[Any]:
    return rows if not limit or limit >= len(rows) else random.Random(seed).sample(rows, limit)


def write_domain_corpus(data: Path, out: Path, limit: Optional[int]) -> tuple[Path, dict[str, int]]:
    rows = []
    for source in DOMAIN_SOURCES:
        for report in _jsonl(data / "duplicate_bug_reports" / source / "corpus.jsonl"):
            text = report_text(report)
            if text:
                rows.append({"id": f"{source}:{report['id']}", "source": source, "text": text})
    rows = _sample(rows, limit)
    counts = {s: sum(r["source"] == s for r in rows) for s in DOMAIN_SOURCES}
    return _write_jsonl(out / "domain_corpus.jsonl", rows), counts


def _paraphrases(data: Path, sts_file: str, sick_split: str, min_score: float) -> list[dict[str, Any]]:
    """Paraphrase pairs of an STS-B file (score >= min_score) and a SICK split (entailment or relatedness >= min_score)."""
    rows = [{"query": r["sentence1"], "document": r["sentence2"], "source": "stsb"}
            for r in _jsonl(data / "stsbenchmark" / sts_file) if r["score"] >= min_score]
    rows += [{"query": r["sentence1"], "document": r["sentence2"], "source": "sick"}
             for r in _jsonl(data / "sick" / "sick.jsonl")
             if r["split"] == sick_split and (r["entailment_label"] == "ENTAILMENT" or r["relatedness_score"] >= min_score)]
    return rows


def write_general_pairs(data: Path, out: Path, min_score: float, limit: Optional[int]) -> tuple[Path, dict[str, int]]:
    """The general training pairs: STS-B train and SICK train paraphrases."""
    rows = _sample(_paraphrases(data, "sts-train.jsonl", "train", min_score), limit)
    return _write_jsonl(out / "general_pairs.jsonl", rows), {s: sum(r["source"] == s for r in rows) for s in ("stsb", "sick")}


def write_general_eval_pairs(data: Path, out: Path, min_score: float, limit: Optional[int]) -> tuple[Path, int]:
    """The general task of R: STS-B dev and SICK dev paraphrases, which no stage trains on."""
    rows = _sample(_paraphrases(data, "sts-dev.jsonl", "dev", min_score), limit)
    return _write_jsonl(out / "general_eval_pairs.jsonl", rows), len(rows)


def write_task_pairs(data: Path, out: Path, limit: Optional[int], split: str = "train") -> tuple[Path, int]:
    """OpenOffice duplicate pairs of one split as (duplicate report, master report) texts."""
    reports = {r["id"]: r for r in _jsonl(data / "duplicate_bug_reports" / "openoffice" / "corpus.jsonl")}
    rows = []
    for pair in _jsonl(data / "duplicate_bug_reports" / "openoffice" / "pairs.jsonl"):
        if pair["split"] != split or pair["duplicate_id"] not in reports or pair["master_id"] not in reports:
            continue
        query, document = report_text(reports[pair["duplicate_id"]]), report_text(reports[pair["master_id"]])
        if query and document:
            rows.append({"query": query, "document": document, "id": f"{pair['duplicate_id']}-{pair['master_id']}"})
    rows = _sample(rows, limit)
    return _write_jsonl(out / f"openoffice_{split}_pairs.jsonl", rows), len(rows)


def eval_files(data: Path, out: Path, corpus_limit: Optional[int], limit_queries: Optional[int]) -> tuple[Path, Path]:
    """The OpenOffice files for the test retrieval: the originals, or (toy runs) a subset with the first
    test queries' reports plus distractors up to `corpus_limit` reports."""
    openoffice = data / "duplicate_bug_reports" / "openoffice"
    corpus, pairs = openoffice / "corpus.jsonl", openoffice / "pairs.jsonl"
    if not corpus_limit:
        return corpus, pairs
    test = [p for p in _jsonl(pairs) if p["split"] == "test"][: limit_queries or None]
    keep = list(dict.fromkeys(i for p in test for i in (p["duplicate_id"], p["master_id"])))
    reports = _jsonl(corpus)
    others = [r["id"] for r in reports if r["id"] not in set(keep)]
    keep_set = set(keep + others[: max(0, corpus_limit - len(keep))])
    return (_write_jsonl(out / "eval_corpus.jsonl", [r for r in reports if r["id"] in keep_set]),
            _write_jsonl(out / "eval_pairs.jsonl", test))


# -- pipelines built from the presets -----------------------------------------

def _preset(name: str) -> dict[str, Any]:
    from lmplatform.config import read_yaml

    return read_yaml(PRESETS / f"{name}.yaml")


def _stage(preset: dict[str, Any], name: str) -> dict[str, Any]:
    return json.loads(json.dumps(next(s for s in preset["stages"] if s["name"] == name)))


def head_warmup_spec(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """configs/mlm_head_warmup.yaml as a one-stage pipeline: the MLM head alone on general sentences under --data."""
    glue, sts = data / "glue_probes", data / "stsbenchmark"
    train = [sts / "sts-train.jsonl", glue / "sst2" / "train_10k.jsonl", glue / "cola" / "train.jsonl"]
    overrides = [f"data.train_paths=[{','.join(str(p) for p in train)}]",
                 f"data.validation_paths=[{glue / 'cola' / 'dev.jsonl'}]",
                 f"optim.precision={args.precision}", "tracking.register_model=false"]
    if args.head_steps:
        overrides += [f"optim.max_steps={args.head_steps}", f"checkpoint.every_n_steps={args.head_steps}",
                      "optim.early_stopping=null"]  # a fixed length instead of the plateau
    return {"name": "mlm_head", "description": "the packaged MiniLM's MLM head, trained alone on general sentences",
            "stages": [{"name": "head", "config": str(HEAD_WARMUP), "init_from": "default", "set": overrides}]}


def mlm_stage(stage: dict[str, Any], domain: Path, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """A preset's MLM domain stage (a `config:` file stage) pointed at the bug-report corpus."""
    stage["set"] = list(stage.get("set", [])) + [
        f"data.train_paths=[{domain}]", "data.text_field=text", "data.dedup=true",
        f"data.validation_fraction={args.domain_validation_fraction}",
        f"optim.max_steps={args.mlm_steps}", f"optim.batch_size={args.mlm_batch_size}",
        f"optim.seed={seed}", f"optim.precision={args.precision}",
        # one forward per token: minutes per validation at this size; the old-domain loss is the forgetting measure
        "objective.pseudo_perplexity_sentences=0",
        f"model.max_seq_length={args.max_seq_length}",
        f"checkpoint.every_n_steps={args.mlm_steps}", "tracking.log_every_n_steps=5",
    ]
    return stage


def pair_stage(stage: dict[str, Any], pairs: Path, steps: Optional[int], args: argparse.Namespace, seed: int,
               validation: Optional[Path] = None) -> dict[str, Any]:
    """A preset's bi-encoder stage (an inline `run:` stage) pointed at a pairs file: `steps` optimizer steps, or
    --pair-epochs epochs when None; validated on `validation`'s pairs, else on a hash split of `pairs`."""
    run = stage["run"]
    split = ({"validation_paths": [str(validation)], "validation_fraction": 0.0} if validation
             else {"validation_paths": [], "validation_fraction": args.pair_validation_fraction})
    run["data"] = {**run.get("data", {}), "train_paths": [str(pairs)], **split}
    length = {"max_steps": steps} if steps else {"epochs": args.pair_epochs, "max_steps": None}
    run["optim"] = {**run.get("optim", {}), **length, "batch_size": args.pair_batch_size, "seed": seed,
                    "precision": args.precision}
    run["model"] = {**run.get("model", {}), "max_seq_length": args.max_seq_length}
    run["checkpoint"] = {**run.get("checkpoint", {}), "every_n_steps": 100_000}  # one run per stage: the final model
    run["tracking"] = {**run.get("tracking", {}), "log_every_n_steps": 5}
    return stage


def old_domain_evaluation(domain: Path, head_from: Optional[str], args: argparse.Namespace) -> dict[str, Any]:
    """Held-out domain texts: the same data config (hence the same hash split) as the MLM stage trains on."""
    evaluation = {"name": "old_domain_mlm_loss", "label": OLD_DOMAIN, "split": "validation",
                  "data": {"train_paths": [str(domain)], "text_field": "text", "dedup": True,
                           "validation_fraction": args.domain_validation_fraction},
                  "max_texts": args.old_domain_texts, "max_seq_length": args.max_seq_length}
    return {**evaluation, "mlm_head_from": head_from} if head_from else evaluation


def task_evaluations(files: dict[str, Path], corpus: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The columns of R: general paraphrase retrieval, then OpenOffice dev retrieval (MRR@10 each)."""
    general = {"name": "retrieval", "task": "general", "max_seq_length": args.max_seq_length,
               "data": {"train_paths": [str(files["general_eval"])]},
               "retrieval": {"split": "all", "relevance": "pair"}}
    distractors = {"paths": [str(corpus)], "fields": ["title", "description"], "max_documents": args.task_distractors}
    openoffice = {"name": "retrieval", "task": "openoffice_dev", "max_seq_length": args.max_seq_length,
                  "data": {"train_paths": [str(files["task_dev"])]},
                  "retrieval": {"split": "all", "distractors": distractors, "max_queries": args.task_queries}}
    return [general, openoffice]


def pipeline_specs(files: dict[str, Path], domain_model: str, fisher: str, corpus: Path, args: argparse.Namespace,
                   seed: int) -> dict[str, dict[str, Any]]:
    """The four strategies' pipelines for one seed (without the shared domain stage, which has already run)."""
    domain, task, general, dev = files["domain"], files["task"], files["general"], files["task_dev"]
    old_domain = old_domain_evaluation(domain, domain_model, args)
    specs: dict[str, dict[str, Any]] = {}

    # 1. The presets' domain_adaptation uses the packaged MiniLM as the task model; here the task model is
    #    trained first (the sequential preset's pair stage, from MiniLM), then the preset's MLM stage runs.
    first = pair_stage(_stage(_preset("sequential"), "task"), task, args.task_steps, args, seed, dev)
    first.update(init_from="default", evaluations=[])
    second = mlm_stage(_stage(_preset("domain_adaptation"), "domain"), domain, args, seed)
    second.update(init_from="stage:task", evaluations=[old_domain])  # before: task backbone + domain head; after: own head
    specs["domain_adaptation"] = {**_preset("domain_adaptation"), "stages": [first, second]}

    sequential = _stage(_preset("sequential"), "task")
    specs["sequential"] = {**_preset("sequential"), "stages": [
        {**pair_stage(sequential, task, args.task_steps, args, seed, dev), "init_from": domain_model,
         "evaluations": [old_domain]}]}

    for name in TASK_MATRIX_STRATEGIES:
        preset = _preset(name)
        general_stage = pair_stage(_stage(preset, "general"), general, args.general_steps, args, seed)
        task_stage = pair_stage(_stage(preset, "task"), task, args.task_steps, args, seed, dev)
        general_stage.update(init_from=domain_model, evaluations=[old_domain])
        task_stage.update(evaluations=[old_domain])
        for stage in (general_stage, task_stage):
            if "ewc" in stage:
                # θ* = the shared domain model; one Fisher (computed once) for both stages
                stage["ewc"] = {"anchor_model": domain_model, "fisher_path": fisher,
                                "lambda": args.ewc_lambda or stage["ewc"]["lambda"]}
        specs[name] = {**preset, "stages": [general_stage, task_stage], "tasks": task_evaluations(files, corpus, args)}
    return specs


def run_spec(spec: dict[str, Any], out: Path, args: argparse.Namespace) -> Any:
    """Validate a pipeline dict against the presets' folder, keep the YAML that ran, and run it."""
    import yaml

    from lmplatform.pipeline import pipeline_config_from_dict, run_pipeline

    spec = {**spec, "name": f"trouble_{spec['name']}", "storage_path": str(out / "pipelines"),
            "tracking": {"tracking_uri": args.tracking_uri, "experiment": "trouble-reports"},
            "base_dir": str(PRESETS)}
    (out / "pipeline_configs").mkdir(parents=True, exist_ok=True)
    (out / "pipeline_configs" / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    # With --resume, a pipeline already run in this folder continues (its finished stages are skipped).
    earlier = sorted((out / "pipelines").glob(f"{spec['name']}-*/pipeline_state.json"))
    resume = earlier[-1].parent.name if earlier else None
    return run_pipeline(pipeline_config_from_dict(spec, PRESETS, source=spec["name"]), resume=resume)


# -- evaluations of final models -----------------------------------------------

def retrieval_rows(models: dict[str, str], corpus: Path, pairs: Path, limit_queries: Optional[int], out: Path,
                   max_seq_length: int) -> dict[str, dict[str, Any]]:
    from lmplatform.evaluation import RetrievalTask
    from lmplatform.evaluation import run_retrieval_task as run_retrieval

    retrievers = [{"name": "bm25", "kind": "bm25"}]
    retrievers += [{"name": name, "kind": "dense", "model": path, "max_seq_length": max_seq_length}
                   for name, path in models.items()]
    task = RetrievalTask.model_validate({
        "datasets": [{"name": "openoffice", "corpus": str(corpus), "relations": str(pairs), "split": "test",
                      "relevance": "group", "limit_queries": limit_queries}],
        "scenarios": [{"name": "dup_to_all", "query_fields": ["title", "description"],
                       "corpus_fields": ["title", "description"]}],
        "retrievers": retrievers, "ks": [1, 10, 20], "mrr_ks": [10],
    })
    result = run_retrieval(task, out / "retrieval")
    return {r["retriever"]: {"queries": r["queries_evaluated"], "corpus": r["corpus_size"],
                             "seconds": round(r["index_seconds"] + r["search_seconds"], 1),
                             **{m: r["metrics"][m] for m in RETRIEVAL_METRICS}} for r in result.details["results"]}


def glue_scores(model: str, probes: list[Any], max_seq_length: int) -> dict[str, float]:
    from lmplatform import Encoder
    from lmplatform.evaluation import probe_encoder

    encoder = Encoder.from_pretrained(model, max_seq_length=max_seq_length)
    scores = {}
    for probe in probes:
        metrics = probe_encoder(encoder, probe)
        scores[probe.name] = metrics["score"]
        print(f"[bench] GLUE {probe.name} probe of {model}: {probe.metric} {metrics['score']:.4f}", flush=True)
    return scores


# -- report ----------------------------------------------------------------------

def _cell(value: Any, digits: int = 4) -> str:
    if isinstance(value, dict):  # {"mean", "std"} over seeds
        return f"{value['mean']:.{digits}f} ± {value['std']:.{digits}f}"
    return "–" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0, "n": len(values)}


def over_seeds(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the same row of every seed: numbers as mean ± std, the rest as the first seed has it."""
    row: dict[str, Any] = {}
    for key, value in per_seed[0].items():
        values = [r.get(key) for r in per_seed]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        row[key] = mean_std([float(v) for v in values]) if numeric and key not in ("queries", "corpus") else value
    return row


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "R@1", "R@10", "R@20", "MRR@10", "nDCG@10", "old-domain MLM loss", "SST-2 acc", "CoLA MCC", "train s"]
    return _markdown(head, [[row["model"], *(_cell(row.get(m), 3) for m in RETRIEVAL_METRICS),
                             _cell(row.get("old_domain_mlm_loss"), 3), _cell(row.get("sst2"), 3), _cell(row.get("cola"), 3),
                             _cell(row.get("train_seconds"), 0)] for row in rows])


def continual_table(continual: dict[str, dict[str, Any]]) -> str:
    head = ["strategy", *CONTINUAL_METRICS]
    return _markdown(head, [[STRATEGIES[name], *(_cell(values.get(m), 3) for m in CONTINUAL_METRICS)]
                            for name, values in continual.items()])


def stage_table(stages: list[dict[str, Any]]) -> str:
    head = ["seed", "pipeline", "stage", "objective", "from", "train s", "stage s (with evaluations)"]
    return _markdown(head, [[str(s["seed"]), s["pipeline"], s["stage"], s["objective"], s["from"],
                             _cell(s["train_seconds"], 1), _cell(s["seconds"], 1)] for s in stages])


def forgetting_rows(results: dict[str, Any], domain_loss: Optional[float], seed: int) -> list[dict[str, Any]]:
    rows = [{"seed": seed, "pipeline": "shared domain MLM", "stage": "domain", "ewc_lambda": None, "mlm_loss_before": None,
             "mlm_loss_after": domain_loss}]
    for name, result in results.items():
        for row in result.forgetting:
            rows.append({"seed": seed, "pipeline": name,
                         **{k: row[k] for k in ("stage", "ewc_lambda", "mlm_loss_before", "mlm_loss_after")}})
    return rows


def forgetting_table(rows: list[dict[str, Any]]) -> str:
    head = ["seed", "pipeline", "stage", "EWC λ", "MLM loss before stage", "after stage"]
    return _markdown(head, [[str(r["seed"]), r["pipeline"], r["stage"], _cell(r["ewc_lambda"], 0) if r["ewc_lambda"] else "–",
                             _cell(r["mlm_loss_before"]), _cell(r["mlm_loss_after"])] for r in rows])


# -- main --------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help=f"Tiny sizes to prove the wiring (overrides: {TOY}).")
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder.")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench" / "trouble_reports"))
    parser.add_argument("--resume", default=None, help="An output folder of an interrupted run: finished pipeline stages, "
                        "the Fisher, finished seeds' scores and the reference rows are reused (so --seeds can add seeds).")
    parser.add_argument("--tracking-uri", default=None, help="Default: sqlite in --out.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44],
                        help="optim.seed of every stage; one full run each.")
    parser.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="auto",
                        help="optim.precision of every stage (auto: bf16 where the CPU has it in hardware).")
    parser.add_argument("--head-steps", type=int, default=None,
                        help="MLM head warm-up steps, fixed (default: configs/mlm_head_warmup.yaml's, to the plateau).")
    parser.add_argument("--mlm-steps", type=int, default=50, help="Steps of each MLM stage (shared domain stage; strategy 1's).")
    parser.add_argument("--pair-epochs", type=float, default=1.0, help="Epochs of each bi-encoder stage.")
    parser.add_argument("--task-steps", type=int, default=None,
                        help="Steps of each bi-encoder stage on OpenOffice train pairs instead.")
    parser.add_argument("--general-steps", type=int, default=None,
                        help="Steps of each bi-encoder stage on general pairs instead.")
    parser.add_argument("--mlm-batch-size", type=int, default=16)
    parser.add_argument("--pair-batch-size", type=int, default=32, help="Pairs per step (in-batch negatives).")
    parser.add_argument("--max-seq-length", type=int, default=128, help="Training and encoding.")
    parser.add_argument("--domain-docs", type=int, default=None, help="Seeded sample of the domain corpus (default: all 8,127).")
    parser.add_argument("--task-pairs", type=int, default=None,
                        help="Seeded sample of the OpenOffice train pairs (default: all).")
    parser.add_argument("--general-pairs", type=int, default=None, help="Seeded sample of the paraphrase pairs (default: all).")
    parser.add_argument("--general-eval-pairs", type=int, default=None,
                        help="Seeded sample of R's general task pairs (default: all).")
    parser.add_argument("--task-queries", type=int, default=300, help="OpenOffice dev queries of R's domain task.")
    parser.add_argument("--task-distractors", type=int, default=1000, help="Corpus reports added to that task's pool.")
    parser.add_argument("--min-score", type=float, default=4.0, help="STS-B score / SICK relatedness for a paraphrase pair.")
    parser.add_argument("--domain-validation-fraction", type=float, default=0.05,
                        help="Held out of the domain corpus (MLM validation and the old-domain loss sample).")
    parser.add_argument("--pair-validation-fraction", type=float, default=0.05, help="Held out of the general pairs.")
    parser.add_argument("--old-domain-texts", type=int, default=128, help="Held-out domain texts for the old-domain MLM loss.")
    parser.add_argument("--fisher-samples", type=int, default=400, help="Domain documents for the EWC Fisher (study: 7,000).")
    parser.add_argument("--fisher-batch-size", type=int, default=1, help="1 = exact empirical Fisher.")
    parser.add_argument("--ewc-lambda", type=float, default=None, help="Default: the ms_ewc preset's (1e6).")
    parser.add_argument("--limit-queries", type=int, default=None, help="Test queries (default: all 498).")
    parser.add_argument("--eval-corpus", type=int, default=None, help="Retrieval corpus size (default: the full 4,548).")
    parser.add_argument("--glue-train", type=int, default=2000, help="Probe train sentences per task (seeded sample).")
    parser.add_argument("--glue-dev", type=int, default=None, help="Probe dev sentences per task (default: all: 872 / 1,043).")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the embedded local Ray.")
    args = parser.parse_args(argv)
    if args.toy:
        for key, value in TOY.items():
            setattr(args, key, value)
    return args


def run_seed(seed: int, args: argparse.Namespace, out: Path, files: dict[str, Path], head_model: str,
             eval_corpus: Path, eval_pairs: Path, probes: list[Any]) -> dict[str, Any]:
    """Every strategy with `seed`: the shared domain MLM stage, the Fisher, the four pipelines, and their scores."""
    from lmplatform.config import DataConfig
    from lmplatform.objectives import compute_fisher_file
    from lmplatform.pipeline import format_table

    out.mkdir(parents=True, exist_ok=True)
    stages: list[dict[str, Any]] = []
    sources = {"default": "MiniLM", head_model: "MiniLM + warmed head"}

    def record(pipeline: str, result: Any, spec: dict[str, Any]) -> None:
        for stage in spec["stages"]:
            state = result.state.stages[stage["name"]]
            objective = "mlm" if "config" in stage else stage["run"]["objective"]["name"]
            stages.append({"seed": seed, "pipeline": pipeline, "stage": stage["name"] + (" (EWC)" if state.ewc_lambda else ""),
                           "objective": objective, "from": sources.get(stage["init_from"], stage["init_from"]),
                           "train_seconds": state.train_seconds, "seconds": state.seconds, "model_dir": state.model_dir})

    # The MLM domain stage shared by strategies 2-4: the sequential preset's first stage, run once per seed.
    domain_stage = {**mlm_stage(_stage(_preset("sequential"), "domain"), files["domain"], args, seed), "init_from": head_model}
    shared_spec = {**_preset("sequential"), "name": "domain_mlm", "stages": [domain_stage]}
    shared = run_spec(shared_spec, out, args)
    record("shared domain MLM", shared, shared_spec)
    domain_model = shared.state.stages["domain"].model_dir
    sources[domain_model] = "shared domain model"

    start = time.perf_counter()
    fisher = out / "fisher_domain_mlm.safetensors"
    data_cfg = DataConfig(train_paths=[str(files["domain"])], text_field="text", dedup=True,
                          validation_fraction=args.domain_validation_fraction)
    meta_file = out / "fisher_domain_mlm.json"
    if fisher.is_file() and meta_file.is_file():  # --resume: computed by the interrupted run
        meta = json.loads(meta_file.read_text())
    else:
        meta = compute_fisher_file(domain_model, data_cfg, str(fisher), args.fisher_samples, args.fisher_batch_size,
                                   max_seq_length=args.max_seq_length, threads=args.cpus)
        meta_file.write_text(json.dumps(meta, default=str))
    seconds = round(time.perf_counter() - start, 2)
    stages.append({"seed": seed, "pipeline": "ms_ewc", "stage": f"Fisher ({meta['gradients']} MLM gradients)",
                   "objective": "fisher", "from": "shared domain model", "train_seconds": seconds, "seconds": seconds})

    results: dict[str, Any] = {}
    specs = pipeline_specs(files, domain_model, str(fisher), eval_corpus, args, seed)
    for name, spec in specs.items():
        results[name] = run_spec(spec, out, args)
        record(name, results[name], spec)
        print(format_table(results[name].forgetting), flush=True)

    finals = {name: result.state.stages[specs[name]["stages"][-1]["name"]].model_dir for name, result in results.items()}
    retrieval = retrieval_rows(finals, eval_corpus, eval_pairs, args.limit_queries, out, args.max_seq_length)
    glue = {name: glue_scores(path, probes, args.max_seq_length) for name, path in finals.items()}
    domain_loss = results["sequential"].state.stages["task"].before[OLD_DOMAIN]["mlm_loss"]
    rows = [{"model": "domain MLM model (shared stage of 2-4; 'before')", "old_domain_mlm_loss": domain_loss,
             "train_seconds": stages[0]["train_seconds"]}]
    for name, label in STRATEGIES.items():
        last = results[name].state.stages[specs[name]["stages"][-1]["name"]]
        train = sum(s["train_seconds"] or 0 for s in stages if s["pipeline"] == name)
        rows.append({"model": label, **retrieval[name], "old_domain_mlm_loss": last.after[OLD_DOMAIN]["mlm_loss"],
                     **glue[name], "train_seconds": train})
    matrices = {}
    for name in TASK_MATRIX_STRATEGIES:
        state = results[name].state
        matrices[name] = {"tasks": [t["task"] for t in specs[name]["tasks"]],
                          "stages": [s["name"] for s in specs[name]["stages"]],
                          "R": [[state.stages[s["name"]].task_scores[t["task"]] for t in specs[name]["tasks"]]
                                for s in specs[name]["stages"]],
                          "baseline": state.baseline_task_scores}
    return {"seed": seed, "rows": rows, "stages": stages, "forgetting": forgetting_rows(results, domain_loss, seed),
            "continual": {name: results[name].continual for name in TASK_MATRIX_STRATEGIES}, "task_matrix": matrices,
            "pipelines": {name: {"run": r.run_name, "mlflow_parent_run_id": r.parent_run_id}
                          for name, r in {"domain_mlm": shared, **results}.items()}}


def cached(path: Path, compute: Callable[[], Any]) -> Any:
    """`compute()`'s JSON, kept at `path`: a resumed run reuses a finished seed's scores and the reference rows
    instead of evaluating those models again (about 20 minutes a seed on 2 cores)."""
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o)))  # numpy scalars
    return json.loads(path.read_text())  # the same types whether computed now or read back


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    import torch

    from lmplatform.data import read_glue_probe
    from lmplatform.ray_runtime import ensure_ray

    torch.set_num_threads(args.cpus)
    out = Path(args.resume).resolve() if args.resume else Path(args.out).resolve() / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    args.tracking_uri = args.tracking_uri or f"sqlite:///{out / 'mlruns.db'}"
    started = time.perf_counter()
    print(f"[bench] output folder {out}; MLflow {args.tracking_uri}; seeds {args.seeds}", flush=True)

    data = Path(args.data)
    domain, domain_counts = write_domain_corpus(data, out / "data", args.domain_docs)
    general, general_counts = write_general_pairs(data, out / "data", args.min_score, args.general_pairs)
    general_eval, general_eval_count = write_general_eval_pairs(data, out / "data", args.min_score, args.general_eval_pairs)
    task, task_count = write_task_pairs(data, out / "data", args.task_pairs)
    task_dev, task_dev_count = write_task_pairs(data, out / "data", None, split="dev")
    eval_corpus, eval_pairs = eval_files(data, out / "data", args.eval_corpus, args.limit_queries)
    files = {"domain": domain, "general": general, "task": task, "task_dev": task_dev, "general_eval": general_eval}
    print(f"[bench] domain corpus {domain_counts}; general pairs {general_counts}; OpenOffice train pairs {task_count}; "
          f"R tasks: {general_eval_count} general pairs, {task_dev_count} OpenOffice dev pairs", flush=True)

    ensure_ray(num_cpus=args.cpus)
    head = run_spec(head_warmup_spec(data, args), out, args)
    head_state = head.state.stages["head"]
    head_model = head_state.model_dir
    print(f"[bench] MLM head warmed in {head_state.train_seconds} s: {head_model}", flush=True)

    probes = [read_glue_probe(name, data / "glue_probes", train_limit=args.glue_train, dev_limit=args.glue_dev)
              for name in ("sst2", "cola")]
    references, zero_shot_glue = cached(out / "references.json", lambda: (
        retrieval_rows({"minilm_zero_shot": "default"}, eval_corpus, eval_pairs, args.limit_queries, out, args.max_seq_length),
        glue_scores("default", probes, args.max_seq_length)))
    seeds = [cached(out / f"seed{seed}" / "seed_result.json",
                    lambda seed=seed: run_seed(seed, args, out / f"seed{seed}", files, head_model, eval_corpus, eval_pairs,
                                               probes))
             for seed in args.seeds]

    rows = [{"model": "BM25", **references["bm25"]},
            {"model": "MiniLM zero-shot (packaged)", **references["minilm_zero_shot"], **zero_shot_glue}]
    rows += [over_seeds([seed["rows"][i] for seed in seeds]) for i in range(len(seeds[0]["rows"]))]
    continual = {name: {m: mean_std([seed["continual"][name][m] for seed in seeds]) for m in CONTINUAL_METRICS
                        if all(m in seed["continual"][name] for seed in seeds)} for name in TASK_MATRIX_STRATEGIES}
    stages = [stage for seed in seeds for stage in seed["stages"]]
    forgetting = [row for seed in seeds for row in seed["forgetting"]]
    total = time.perf_counter() - started
    table, continual_md = markdown_table(rows), continual_table(continual)
    stage_md, forgetting_md = stage_table(stages), forgetting_table(forgetting)
    queries, corpus = references["bm25"]["queries"], references["bm25"]["corpus"]
    print(f"\n## Trouble-report study on public data{' (TOY RUN: numbers are meaningless)' if args.toy else ''}\n")
    print(f"OpenOffice test duplicate retrieval: {queries} queries, corpus {corpus} reports; mean ± std over seeds "
          f"{args.seeds}; old-domain MLM loss on {args.old_domain_texts} held-out domain texts (fixed masks); GLUE dev "
          f"probes (SST-2 accuracy, CoLA Matthews corr.), logistic regression on {args.glue_train} train sentences.\n")
    print(table + "\n\nContinual-learning metrics (R: MRR@10 of general paraphrase and OpenOffice dev retrieval):\n\n"
          + continual_md + "\n\nOld-domain MLM loss before/after every stage:\n\n" + forgetting_md
          + "\n\nTime per stage:\n\n" + stage_md)
    print(f"\nMLM head warm-up {head_state.train_seconds:.0f} s, total {total:.0f} s ({total / 60:.1f} min)")
    write_result("trouble_reports_toy" if args.toy else "trouble_reports", {
        "toy_run": args.toy, "settings": {k: v for k, v in vars(args).items()},
        "data": {"domain_corpus": domain_counts, "general_pairs": general_counts, "openoffice_train_pairs": task_count,
                 "general_eval_pairs": general_eval_count, "openoffice_dev_pairs": task_dev_count,
                 "retrieval_queries": queries, "retrieval_corpus": corpus},
        "head_warmup": {"model": head_model, "train_seconds": head_state.train_seconds},
        "rows": rows, "continual": continual, "per_seed": seeds, "total_seconds": round(total, 1), "output_folder": str(out),
        "markdown": table, "continual_markdown": continual_md, "forgetting_markdown": forgetting_md, "stages_markdown": stage_md,
    })


if __name__ == "__main__":
    main()
