"""`make demo`: the whole product on embedded defaults, on the shipped trouble reports.

1. MLM domain adaptation, 2. DeCLUTR, 3. bi-encoder on duplicate pairs without and with EWC
(one pipeline: configs/pipelines/demo.yaml), 4. duplicate retrieval on the held-out test pairs
against BM25 and the base model, plus old-domain MLM loss (forgetting), 5. a small Tune study of
the InfoNCE temperature, selected on the dev pairs, 6. the champion gate on the test pairs,
7. Serve the champion, query it, shut down.
Every run lands in the local MLflow; one summary table closes the demo, and `results_file` keeps its times
and figures (docs/benchmarks.md cites them).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

from lmplatform.evaluation.tasks.retrieval.config import RetrievalTask
from lmplatform.evaluation.tasks.retrieval.task import run as run_retrieval
from lmplatform.pipeline.config import load_pipeline_config
from lmplatform.pipeline.runner import run_pipeline
from lmplatform.ray_runtime import ensure_ray
from lmplatform.result_files import write_result_file
from lmplatform.runtime import project_root
from lmplatform.serving.demo import serve_and_query
from lmplatform.tracking.mlflow_tracking import TrackedRun
from lmplatform.tune.tuner import run_study

DEMO_PIPELINE = Path("configs/pipelines/demo.yaml")
DEMO_SPACE = Path("tune_spaces/demo_temperature.yaml")
DEMO_REPORTS = Path("data/demo/reports.jsonl")
DEMO_DUPLICATES = Path("data/demo/duplicates.jsonl")
DEMO_TEST_PAIRS = Path("data/demo/pairs_test.jsonl")
RETRIEVAL_METRICS = ("mrr@5", "recall@1", "recall@5", "recall@10")
STUDY_METRIC = "val_ir_ndcg_at_10"


@dataclass
class DemoSummary:
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (step, result, seconds)
    seconds: dict[str, float] = field(default_factory=dict)  # by step key: train, evaluate, tune, serve
    metrics: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, step: str, result: str, started: float) -> None:
        seconds = time.perf_counter() - started
        self.seconds[key] = round(seconds, 1)
        self.rows.append((step, result, f"{seconds:.0f}"))

    def result(self, total_seconds: float) -> dict[str, Any]:
        """The result file's payload: seconds per step and in all, and the figures the summary table shows."""
        return {"total_seconds": round(total_seconds, 1), "seconds": self.seconds, **self.metrics,
                "summary": [{"step": step, "result": result, "seconds": seconds} for step, result, seconds in self.rows]}


def heldout_relations(out: Path) -> Path:
    """The duplicates with the held-out test split marked (data/demo/build_pairs.py splits by duplicate group),
    so retrieval is scored on pairs no training stage and no tuning choice saw."""
    test_ids = {json.loads(line)["id"] for line in (project_root() / DEMO_TEST_PAIRS).open(encoding="utf-8")}
    rows = [json.loads(line) for line in (project_root() / DEMO_DUPLICATES).open(encoding="utf-8")]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({**r, "split": "test" if r["query_id"] in test_ids else "other"}, ensure_ascii=False)
                           + "\n" for r in rows), encoding="utf-8")
    return out


def evaluate_retrieval(models: dict[str, str], out: Path) -> list[dict[str, Any]]:
    """Duplicate retrieval (title + text of the new report -> the reports) for each model, BM25 and the base."""
    relations = heldout_relations(out / "duplicates_split.jsonl")
    retrievers = [{"name": "bm25", "kind": "bm25"}, {"name": "base MiniLM", "kind": "dense", "model": "default"}]
    retrievers += [{"name": name, "kind": "dense", "model": model} for name, model in models.items()]
    task = RetrievalTask.model_validate({
        "datasets": [{"name": "demo", "corpus": str(project_root() / DEMO_REPORTS), "relations": str(relations),
                      "query_id_field": "query_id", "target_id_field": "duplicate_of", "split_field": "split",
                      "split": "test", "query_text_source": "relations"}],
        "scenarios": [{"name": "duplicate_to_report", "query_fields": ["query_title", "query_text"],
                       "corpus_fields": ["title", "text"]}],
        "retrievers": retrievers, "ks": [1, 5, 10], "mrr_ks": [5],
    })
    return run_retrieval(task, out).details["results"]


def _gate_numbers(decision: Any) -> str:
    """The gate's comparison in one short line; the full reason is in MLflow (`lmp models why`)."""
    comparison = decision.verdict.comparison if decision.verdict is not None else None
    if comparison is None:
        return decision.reason
    return comparison.describe()


def run_demo(data: Optional[Path] = None, overrides: list[str] = (), serve: bool = True,  # type: ignore[assignment]
             tune: bool = True, resume: Optional[str] = None, results_file: Optional[Path] = None) -> DemoSummary:
    demo_started = time.perf_counter()
    ensure_ray(serving=serve)  # one Ray for the whole demo: its service's metrics need Ray's collection on
    console = Console()
    summary = DemoSummary()
    cfg = load_pipeline_config(project_root() / DEMO_PIPELINE, list(overrides))
    if data:
        cfg.stage("domain").set.append(f"data.train_paths=[{data}]")

    started = time.perf_counter()
    console.rule("[bold]1-3. MLM -> DeCLUTR -> pairs without / with EWC (Ray Train, one MLflow parent run)")
    result = run_pipeline(cfg, resume=resume)
    stages = result.state.stages
    summary.add("train", "train: MLM, DeCLUTR, pairs, pairs + EWC", f"pipeline run {result.run_name}", started)

    started = time.perf_counter()
    console.rule("[bold]4. Evaluation: duplicate retrieval on the held-out test pairs, and forgetting")
    work = Path(result.folder) / "demo"
    models = {name: stages[name].model_dir for name in ("domain", "pairs", "pairs_ewc")}
    rows = evaluate_retrieval(models, work / "retrieval")
    table = Table(title="Duplicate retrieval, held-out test pairs (query: new report -> the 320 reports)")
    for column in ("retriever", "queries", *RETRIEVAL_METRICS):
        table.add_column(column, justify="left" if column == "retriever" else "right")
    for row in rows:
        table.add_row(row["retriever"], str(row["queries_evaluated"]), *(f"{row['metrics'][m]:.3f}" for m in RETRIEVAL_METRICS))
    console.print(table)
    by_name = {r["retriever"]: r["metrics"] for r in rows}
    parent = TrackedRun(result.tracking_uri, result.parent_run_id)
    parent.log_metrics({f"retrieval/{name.replace(' ', '_')}/{m.replace('@', '_at_')}": metrics[m]
                        for name, metrics in by_name.items() for m in RETRIEVAL_METRICS})

    # The pipeline printed every stage's old-domain loss; the summary keeps what EWC is for.
    loss = {name: stages[name].after["domain_reports"]["mlm_loss"] for name in ("pairs", "pairs_ewc")}
    loss["domain"] = stages["declutr"].before["domain_reports"]["mlm_loss"]
    summary.metrics |= {"retrieval_test": by_name, "old_domain_mlm_loss": loss}
    summary.add("evaluate", "evaluate: retrieval MRR@5 (held-out test)",
                f"pairs+EWC {by_name['pairs_ewc']['mrr@5']:.3f} · pairs {by_name['pairs']['mrr@5']:.3f} · "
                f"base {by_name['base MiniLM']['mrr@5']:.3f} · BM25 {by_name['bm25']['mrr@5']:.3f}", started)
    summary.rows.append(("forgetting: old-domain MLM loss",
                         f"{loss['domain']:.3f} after MLM → {loss['pairs']:.3f} without EWC, {loss['pairs_ewc']:.3f} with",
                         ""))

    served = stages["pairs_ewc"].model_dir
    if tune:
        started = time.perf_counter()
        console.rule("[bold]5-6. Tune the InfoNCE temperature (Ray Tune + Optuna), then the champion gate")
        study = run_study(project_root() / DEMO_SPACE, [f"model.name_or_path={stages['declutr'].model_dir}"],
                          tracking_uri=result.tracking_uri)
        tau = study.best_params.get("objective.temperature")
        scores = ", ".join(f"τ={r['params']['objective.temperature']:.3g}: {r['metrics'][STUDY_METRIC]:.3f}"
                           for r in study.trials if STUDY_METRIC in r["metrics"])
        summary.metrics["study"] = {"best_params": study.best_params,
                                    "trials": [{"params": r["params"], STUDY_METRIC: r["metrics"].get(STUDY_METRIC)}
                                               for r in study.trials]}
        summary.add("tune", f"tune: {len(study.trials)} trials over τ, dev nDCG@10",
                    f"{scores}; best τ={tau:.3g}" if tau is not None else "no trial finished", started)
        decision = study.champion
        if decision is not None:
            comparison = decision.verdict.comparison if decision.verdict is not None else None
            summary.metrics["champion_gate"] = {
                "registered_model": decision.registered_model, "version": decision.version, "alias": decision.alias,
                "moved": decision.moved, "previous_version": decision.previous_version, "reason": decision.reason,
                "comparison": asdict(comparison) if comparison is not None else None}
            state = (f"moved to version {decision.version}" if decision.moved
                     else f"stays on version {decision.previous_version}" if decision.previous_version else "not set")
            summary.rows.append(("champion gate (test pairs)", f"{decision.alias} {state}: {_gate_numbers(decision)}", ""))
            if decision.moved or decision.previous_version:
                served = f"models:/{decision.registered_model}@{decision.alias}"

    if serve:
        started = time.perf_counter()
        console.rule(f"[bold]7. Serve {served} over the reports, query it over HTTP, shut down")
        answers = serve_and_query(served, project_root() / DEMO_REPORTS, tracking_uri=result.tracking_uri,
                                  work_dir=work / "serve")
        top = answers[0]["hits"][0] if answers and answers[0]["hits"] else None
        summary.add("serve", f"serve: {len(answers)} queries over HTTP",
                    f"'{answers[0]['query']}' → {top['id']} {top['title']!r}" if top else "no hits", started)

    final = Table(title="lmp demo: summary")
    for column in ("step", "result", "seconds"):
        final.add_column(column, justify="right" if column == "seconds" else "left")
    for row in summary.rows:
        final.add_row(*row)
    console.print(final)
    console.print(f"Every run is in MLflow ({result.tracking_uri}); browse it with:")
    console.print(f"  .venv/bin/mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True)
    if results_file is not None:
        console.print(f"Result file: {write_result_file(results_file, summary.result(time.perf_counter() - demo_started))}")
    return summary
