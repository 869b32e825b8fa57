"""The trouble-report study redone on public data: four training strategies for a duplicate-report retriever.

Domain corpus: the bug-report texts of OpenOffice, Hadoop and SeaMonkey (title + description).
General task data: paraphrase pairs from STS-B train (score >= 4) and SICK train (entailment or
relatedness >= 4), in place of MS MARCO. Domain task data: OpenOffice duplicate pairs, train split.
Each strategy is a pipeline built from the presets in configs/pipelines/ (each stage a Ray Train run
under one MLflow parent run):

  1. domain adaptation  bi-encoder on OpenOffice train pairs (from MiniLM) -> MLM on the domain corpus
  2. sequential         MLM on the domain corpus -> bi-encoder on OpenOffice train pairs
  3. multi-stage        MLM domain -> bi-encoder on general pairs -> bi-encoder on OpenOffice train pairs
  4. multi-stage + EWC  as 3, both pair stages with EWC against the domain model (Fisher of the MLM loss
                        on the domain corpus, computed once and shared by both stages)

The MLM domain stage of 2-4 is identical, so it runs once (its own one-stage pipeline) and 2-4 start
from its model folder (`init_from: <folder>`, `ewc.anchor_model: <folder>`).

Reported per strategy, with the packaged MiniLM (zero-shot) and BM25 as reference rows:
- MRR@5 and Recall@{1,5,10,20} on OpenOffice test-split duplicate retrieval over the full corpus
  (4,548 reports minus the query; relevant = the rest of the query's duplicate group);
- old-domain MLM loss on a held-out sample of the domain corpus (the hash split the MLM stage did not
  train on, fixed masks): after the domain MLM stage ("before"), and after the later stages without
  and with EWC (bi-encoder exports borrow the domain model's MLM head);
- GLUE SST-2 accuracy and CoLA Matthews correlation (dev) of a logistic-regression probe on the frozen
  mean-pooled embeddings, for the base model and each final model;
- wall-clock seconds of every stage.

    python bench/trouble_reports.py            # full size: about 30 minutes on 2 cores (the defaults)
    python bench/trouble_reports.py --toy      # every stage at 2 steps on small samples: a few minutes

Outputs go to --out (data files, the pipeline YAMLs actually run, Fisher, MLflow sqlite, Ray Train
storage); the table to bench/results/trouble_reports.json (trouble_reports_toy.json for --toy).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "configs" / "pipelines"
DOMAIN_SOURCES = ("openoffice", "hadoop", "seamonkey")
OLD_DOMAIN = "domain_reports"  # the evaluation label used by the presets
RETRIEVAL_METRICS = ("mrr@5", "recall@1", "recall@5", "recall@10", "recall@20")
STRATEGIES = {
    "domain_adaptation": "1. domain adaptation (task model -> MLM domain)",
    "sequential": "2. sequential (MLM domain -> domain pairs)",
    "multi_stage": "3. multi-stage (MLM domain -> general -> domain pairs)",
    "ms_ewc": "4. multi-stage + EWC",
}

TOY = {"mlm_steps": 2, "task_steps": 2, "general_steps": 2, "mlm_batch_size": 4, "pair_batch_size": 4,
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


def write_general_pairs(data: Path, out: Path, min_score: float, limit: Optional[int]) -> tuple[Path, dict[str, int]]:
    """Paraphrase pairs: STS-B train with score >= min_score, SICK train with entailment or relatedness >= min_score."""
    rows = [{"query": r["sentence1"], "document": r["sentence2"], "source": "stsb"}
            for r in _jsonl(data / "stsbenchmark" / "sts-train.jsonl") if r["score"] >= min_score]
    rows += [{"query": r["sentence1"], "document": r["sentence2"], "source": "sick"}
             for r in _jsonl(data / "sick" / "sick.jsonl")
             if r["split"] == "train" and (r["entailment_label"] == "ENTAILMENT" or r["relatedness_score"] >= min_score)]
    rows = _sample(rows, limit)
    return _write_jsonl(out / "general_pairs.jsonl", rows), {s: sum(r["source"] == s for r in rows) for s in ("stsb", "sick")}


def write_task_pairs(data: Path, out: Path, limit: Optional[int]) -> tuple[Path, int]:
    """OpenOffice duplicate pairs of the train split as (duplicate report, master report) texts."""
    reports = {r["id"]: r for r in _jsonl(data / "duplicate_bug_reports" / "openoffice" / "corpus.jsonl")}
    rows = []
    for pair in _jsonl(data / "duplicate_bug_reports" / "openoffice" / "pairs.jsonl"):
        if pair["split"] != "train" or pair["duplicate_id"] not in reports or pair["master_id"] not in reports:
            continue
        query, document = report_text(reports[pair["duplicate_id"]]), report_text(reports[pair["master_id"]])
        if query and document:
            rows.append({"query": query, "document": document, "id": f"{pair['duplicate_id']}-{pair['master_id']}"})
    rows = _sample(rows, limit)
    return _write_jsonl(out / "openoffice_train_pairs.jsonl", rows), len(rows)


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
    from lmplatform.config.loader import read_yaml

    return read_yaml(PRESETS / f"{name}.yaml")


def _stage(preset: dict[str, Any], name: str) -> dict[str, Any]:
    return json.loads(json.dumps(next(s for s in preset["stages"] if s["name"] == name)))


def mlm_stage(stage: dict[str, Any], domain: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A preset's MLM domain stage (a `config:` file stage) pointed at the bug-report corpus."""
    stage["set"] = list(stage.get("set", [])) + [
        f"data.train_paths=[{domain}]", "data.text_field=text", "data.dedup=true",
        f"data.validation_fraction={args.domain_validation_fraction}",
        f"optim.max_steps={args.mlm_steps}", f"optim.batch_size={args.mlm_batch_size}",
        # one forward per token: minutes per validation at this size; the old-domain loss is the forgetting measure
        "objective.pseudo_perplexity_sentences=0",
        f"model.max_seq_length={args.max_seq_length}",
        f"checkpoint.every_n_steps={args.mlm_steps}", "tracking.log_every_n_steps=5",
    ]
    return stage


def pair_stage(stage: dict[str, Any], pairs: Path, steps: int, args: argparse.Namespace) -> dict[str, Any]:
    """A preset's bi-encoder stage (an inline `run:` stage) pointed at a pairs file."""
    run = stage["run"]
    run["data"] = {**run.get("data", {}), "train_paths": [str(pairs)], "validation_fraction": args.pair_validation_fraction}
    run["optim"] = {**run.get("optim", {}), "max_steps": steps, "batch_size": args.pair_batch_size}
    run["model"] = {**run.get("model", {}), "max_seq_length": args.max_seq_length}
    run["checkpoint"] = {**run.get("checkpoint", {}), "every_n_steps": steps}
    run["tracking"] = {**run.get("tracking", {}), "log_every_n_steps": 5}
    return stage


def old_domain_evaluation(domain: Path, head_from: Optional[str], args: argparse.Namespace) -> dict[str, Any]:
    """Held-out domain texts: the same data config (hence the same hash split) as the MLM stage trains on."""
    evaluation = {"name": "old_domain_mlm_loss", "label": OLD_DOMAIN, "split": "validation",
                  "data": {"train_paths": [str(domain)], "text_field": "text", "dedup": True,
                           "validation_fraction": args.domain_validation_fraction},
                  "max_texts": args.old_domain_texts, "max_seq_length": args.max_seq_length}
    return {**evaluation, "mlm_head_from": head_from} if head_from else evaluation


def pipeline_specs(files: dict[str, Path], domain_model: str, fisher: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The four strategies' pipelines (without the shared domain stage, which has already run)."""
    domain, task, general = files["domain"], files["task"], files["general"]
    old_domain = old_domain_evaluation(domain, domain_model, args)
    specs: dict[str, dict[str, Any]] = {}

    # 1. The presets' domain_adaptation uses the packaged MiniLM as the task model; here the task model is
    #    trained first (the sequential preset's pair stage, from MiniLM), then the preset's MLM stage runs.
    first = pair_stage(_stage(_preset("sequential"), "task"), task, args.task_steps, args)
    first.update(init_from="default", evaluations=[])
    second = mlm_stage(_stage(_preset("domain_adaptation"), "domain"), domain, args)
    second.update(init_from="stage:task", evaluations=[old_domain])  # before: task backbone + domain head; after: own head
    specs["domain_adaptation"] = {**_preset("domain_adaptation"), "stages": [first, second]}

    sequential = _stage(_preset("sequential"), "task")
    specs["sequential"] = {**_preset("sequential"), "stages": [
        {**pair_stage(sequential, task, args.task_steps, args), "init_from": domain_model, "evaluations": [old_domain]}]}

    for name in ("multi_stage", "ms_ewc"):
        preset = _preset(name)
        general_stage = pair_stage(_stage(preset, "general"), general, args.general_steps, args)
        task_stage = pair_stage(_stage(preset, "task"), task, args.task_steps, args)
        general_stage.update(init_from=domain_model, evaluations=[old_domain])
        task_stage.update(evaluations=[old_domain])
        for stage in (general_stage, task_stage):
            if "ewc" in stage:
                # θ* = the shared domain model; one Fisher (computed once) for both stages
                stage["ewc"] = {"anchor_model": domain_model, "fisher_path": fisher,
                                "lambda": args.ewc_lambda or stage["ewc"]["lambda"]}
        specs[name] = {**preset, "stages": [general_stage, task_stage]}
    return specs


def run_spec(spec: dict[str, Any], out: Path, args: argparse.Namespace) -> Any:
    """Validate a pipeline dict against the presets' folder, keep the YAML that ran, and run it."""
    import yaml

    from lmplatform.pipeline.config import pipeline_config_from_dict
    from lmplatform.pipeline.runner import run_pipeline

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
    from lmplatform.evaluation.config import RetrievalTask
    from lmplatform.evaluation.tasks.retrieval import run_retrieval_task

    retrievers = [{"name": "bm25", "kind": "bm25"}]
    retrievers += [{"name": name, "kind": "dense", "model": path, "max_seq_length": max_seq_length} for name, path in models.items()]
    task = RetrievalTask.model_validate({
        "datasets": [{"name": "openoffice", "corpus": str(corpus), "relations": str(pairs), "split": "test",
                      "relevance": "group", "limit_queries": limit_queries}],
        "scenarios": [{"name": "dup_to_all", "query_fields": ["title", "description"], "corpus_fields": ["title", "description"]}],
        "retrievers": retrievers, "ks": [1, 5, 10, 20], "mrr_ks": [5],
    })
    result = run_retrieval_task(task, out / "retrieval")
    return {r["retriever"]: {"queries": r["queries_evaluated"], "corpus": r["corpus_size"],
                             "seconds": round(r["index_seconds"] + r["search_seconds"], 1),
                             **{m: r["metrics"][m] for m in RETRIEVAL_METRICS}} for r in result.details["results"]}


def glue_scores(model: str, probes: list[Any], max_seq_length: int) -> dict[str, float]:
    from lmplatform.evaluation.probes import probe_encoder
    from lmplatform.models.encoder import Encoder

    encoder = Encoder.from_pretrained(model, max_seq_length=max_seq_length)
    scores = {}
    for probe in probes:
        metrics = probe_encoder(encoder, probe)
        scores[probe.name] = metrics["score"]
        print(f"[bench] GLUE {probe.name} probe of {model}: {probe.metric} {metrics['score']:.4f}", flush=True)
    return scores


# -- report ----------------------------------------------------------------------

def _cell(value: Any, digits: int = 4) -> str:
    return "–" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "MRR@5", "R@1", "R@5", "R@10", "R@20", "old-domain MLM loss", "SST-2 acc", "CoLA MCC", "train s"]
    return _markdown(head, [[row["model"], *(_cell(row.get(m)) for m in RETRIEVAL_METRICS), _cell(row.get("old_domain_mlm_loss")),
                             _cell(row.get("sst2")), _cell(row.get("cola")), _cell(row.get("train_seconds"), 0)] for row in rows])


def stage_table(stages: list[dict[str, Any]]) -> str:
    head = ["pipeline", "stage", "objective", "from", "steps", "train s", "stage s (with evaluations)"]
    return _markdown(head, [[s["pipeline"], s["stage"], s["objective"], s["from"], str(s["steps"]),
                             _cell(s["train_seconds"], 1), _cell(s["seconds"], 1)] for s in stages])


def forgetting_rows(results: dict[str, Any], domain_loss: Optional[float]) -> list[dict[str, Any]]:
    rows = [{"pipeline": "shared domain MLM", "stage": "domain", "ewc_lambda": None, "mlm_loss_before": None,
             "mlm_loss_after": domain_loss}]
    for name, result in results.items():
        for row in result.forgetting:
            rows.append({"pipeline": name, **{k: row[k] for k in ("stage", "ewc_lambda", "mlm_loss_before", "mlm_loss_after")}})
    return rows


def forgetting_table(rows: list[dict[str, Any]]) -> str:
    head = ["pipeline", "stage", "EWC λ", "MLM loss before stage", "after stage"]
    return _markdown(head, [[r["pipeline"], r["stage"], _cell(r["ewc_lambda"], 0) if r["ewc_lambda"] else "–",
                             _cell(r["mlm_loss_before"]), _cell(r["mlm_loss_after"])] for r in rows])


# -- main --------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help=f"Tiny sizes to prove the wiring (overrides: {TOY}).")
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder.")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench" / "trouble_reports"))
    parser.add_argument("--resume", default=None, help="An output folder of an interrupted run: finished pipeline stages and the Fisher are reused.")
    parser.add_argument("--tracking-uri", default=None, help="Default: sqlite in --out.")
    parser.add_argument("--mlm-steps", type=int, default=50, help="Steps of each MLM stage (shared domain stage; strategy 1's).")
    parser.add_argument("--task-steps", type=int, default=25, help="Steps of each bi-encoder stage on OpenOffice train pairs.")
    parser.add_argument("--general-steps", type=int, default=40, help="Steps of each bi-encoder stage on general pairs.")
    parser.add_argument("--mlm-batch-size", type=int, default=16)
    parser.add_argument("--pair-batch-size", type=int, default=32, help="Pairs per step (in-batch negatives).")
    parser.add_argument("--max-seq-length", type=int, default=128, help="Training and encoding.")
    parser.add_argument("--domain-docs", type=int, default=None, help="Seeded sample of the domain corpus (default: all 8,127).")
    parser.add_argument("--task-pairs", type=int, default=None, help="Seeded sample of the OpenOffice train pairs (default: all).")
    parser.add_argument("--general-pairs", type=int, default=None, help="Seeded sample of the paraphrase pairs (default: all).")
    parser.add_argument("--min-score", type=float, default=4.0, help="STS-B score / SICK relatedness for a paraphrase pair.")
    parser.add_argument("--domain-validation-fraction", type=float, default=0.05,
                        help="Held out of the domain corpus (MLM validation and the old-domain loss sample).")
    parser.add_argument("--pair-validation-fraction", type=float, default=0.05)
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


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    import torch

    from lmplatform.config.schema import DataConfig
    from lmplatform.data.glue_probes import read_glue_probe
    from lmplatform.objectives.ewc_setup import compute_fisher_file
    from lmplatform.pipeline.runner import format_table
    from lmplatform.ray_runtime import ensure_ray

    torch.set_num_threads(args.cpus)
    out = Path(args.resume).resolve() if args.resume else Path(args.out).resolve() / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    args.tracking_uri = args.tracking_uri or f"sqlite:///{out / 'mlruns.db'}"
    started = time.perf_counter()
    print(f"[bench] output folder {out}; MLflow {args.tracking_uri}", flush=True)

    data = Path(args.data)
    domain, domain_counts = write_domain_corpus(data, out / "data", args.domain_docs)
    general, general_counts = write_general_pairs(data, out / "data", args.min_score, args.general_pairs)
    task, task_count = write_task_pairs(data, out / "data", args.task_pairs)
    eval_corpus, eval_pairs = eval_files(data, out / "data", args.eval_corpus, args.limit_queries)
    files = {"domain": domain, "general": general, "task": task}
    print(f"[bench] domain corpus {domain_counts}; general pairs {general_counts}; OpenOffice train pairs {task_count}", flush=True)

    ensure_ray(num_cpus=args.cpus)
    stages: list[dict[str, Any]] = []
    domain_model_path = [""]  # known once the shared stage has run

    def record(pipeline: str, result: Any, spec: dict[str, Any]) -> None:
        for stage in spec["stages"]:
            state = result.state.stages[stage["name"]]
            objective = "mlm" if "config" in stage else stage["run"]["objective"]["name"]
            steps = args.mlm_steps if objective == "mlm" else (args.general_steps if stage["name"] == "general" else args.task_steps)
            source = {"default": "MiniLM", domain_model_path[0]: "shared domain model"}.get(stage["init_from"], stage["init_from"])
            stages.append({"pipeline": pipeline, "stage": stage["name"] + (" (EWC)" if state.ewc_lambda else ""),
                           "objective": objective, "from": source, "steps": steps,
                           "train_seconds": state.train_seconds, "seconds": state.seconds, "model_dir": state.model_dir})

    # The MLM domain stage shared by strategies 2-4: the sequential preset's first stage, run once.
    shared_spec = {**_preset("sequential"), "name": "domain_mlm",
                   "stages": [mlm_stage(_stage(_preset("sequential"), "domain"), domain, args)]}
    shared = run_spec(shared_spec, out, args)
    record("shared domain MLM", shared, shared_spec)
    domain_model = domain_model_path[0] = shared.state.stages["domain"].model_dir

    start = time.perf_counter()
    fisher = out / "fisher_domain_mlm.safetensors"
    data_cfg = DataConfig(train_paths=[str(domain)], text_field="text", dedup=True, validation_fraction=args.domain_validation_fraction)
    meta_file = out / "fisher_domain_mlm.json"
    if fisher.is_file() and meta_file.is_file():  # --resume: computed by the interrupted run
        meta = json.loads(meta_file.read_text())
    else:
        meta = compute_fisher_file(domain_model, data_cfg, str(fisher), args.fisher_samples, args.fisher_batch_size,
                                   max_seq_length=args.max_seq_length, threads=args.cpus)
        meta_file.write_text(json.dumps(meta, default=str))
    stages.append({"pipeline": "ms_ewc", "stage": "Fisher (MLM loss, domain corpus)", "objective": "fisher",
                   "from": "domain", "steps": int(meta["gradients"]), "train_seconds": round(time.perf_counter() - start, 2),
                   "seconds": round(time.perf_counter() - start, 2)})
    print(f"[bench] Fisher of the domain model from {meta['gradients']} gradients in {stages[-1]['seconds']} s", flush=True)

    results: dict[str, Any] = {}
    specs = pipeline_specs(files, domain_model, str(fisher), args)
    for name, spec in specs.items():
        results[name] = run_spec(spec, out, args)
        record(name, results[name], spec)
        print(format_table(results[name].forgetting), flush=True)

    finals = {name: result.state.stages[specs[name]["stages"][-1]["name"]].model_dir for name, result in results.items()}
    start = time.perf_counter()
    retrieval = retrieval_rows({"minilm_zero_shot": "default", **finals}, eval_corpus, eval_pairs, args.limit_queries, out,
                               args.max_seq_length)
    retrieval_seconds = time.perf_counter() - start
    start = time.perf_counter()
    probes = [read_glue_probe(name, data / "glue_probes", train_limit=args.glue_train, dev_limit=args.glue_dev)
              for name in ("sst2", "cola")]
    glue = {name: glue_scores(path, probes, args.max_seq_length) for name, path in {"minilm_zero_shot": "default", **finals}.items()}
    glue_seconds = time.perf_counter() - start

    domain_loss = results["sequential"].state.stages["task"].before[OLD_DOMAIN]["mlm_loss"]
    rows = [{"model": "BM25", **retrieval["bm25"]},
            {"model": "MiniLM zero-shot (packaged)", **retrieval["minilm_zero_shot"], **glue["minilm_zero_shot"]},
            {"model": "domain MLM model (shared stage of 2-4; 'before')", "old_domain_mlm_loss": domain_loss,
             "train_seconds": stages[0]["train_seconds"]}]
    for name, label in STRATEGIES.items():
        last = results[name].state.stages[specs[name]["stages"][-1]["name"]]
        train = sum(s["train_seconds"] or 0 for s in stages if s["pipeline"] == name)
        rows.append({"model": label, **retrieval[name], "old_domain_mlm_loss": last.after[OLD_DOMAIN]["mlm_loss"],
                     **glue[name], "train_seconds": train})
    forgetting = forgetting_rows(results, domain_loss)
    total = time.perf_counter() - started
    table, stage_md, forgetting_md = markdown_table(rows), stage_table(stages), forgetting_table(forgetting)
    queries = retrieval["bm25"]["queries"]
    corpus = retrieval["bm25"]["corpus"]
    print(f"\n## Trouble-report study on public data{' (TOY RUN: numbers are meaningless)' if args.toy else ''}\n")
    print(f"OpenOffice test duplicate retrieval: {queries} queries, corpus {corpus} reports; "
          f"old-domain MLM loss on {args.old_domain_texts} held-out domain texts (fixed masks); "
          f"GLUE dev probes (SST-2 accuracy, CoLA Matthews corr.), logistic regression on {args.glue_train} train sentences.\n")
    print(table + "\n\nOld-domain MLM loss before/after every stage:\n\n" + forgetting_md + "\n\nTime per stage:\n\n" + stage_md)
    print(f"\nretrieval evaluation {retrieval_seconds:.0f} s, GLUE probes {glue_seconds:.0f} s, total {total:.0f} s "
          f"({total / 60:.1f} min)")
    write_result("trouble_reports_toy" if args.toy else "trouble_reports", {
        "toy_run": args.toy, "settings": {k: v for k, v in vars(args).items()},
        "data": {"domain_corpus": domain_counts, "general_pairs": general_counts, "openoffice_train_pairs": task_count,
                 "retrieval_queries": queries, "retrieval_corpus": corpus},
        "rows": rows, "forgetting": forgetting, "stages": stages, "retrieval_seconds": round(retrieval_seconds, 1),
        "glue_seconds": round(glue_seconds, 1), "total_seconds": round(total, 1), "output_folder": str(out),
        "pipelines": {name: {"run": r.run_name, "mlflow_parent_run_id": r.parent_run_id} for name, r in
                      {"domain_mlm": shared, **results}.items()},
        "markdown": table, "forgetting_markdown": forgetting_md, "stages_markdown": stage_md,
    })


if __name__ == "__main__":
    main()
