"""The retrieval evaluation: as an `lmp evaluate` task, every dataset x scenario x retriever scored with
`retrieval_report`; as a pipeline stage's evaluation, one model ranking a pairs file's queries (`evaluate_model`).

Models are loaded once per path and shared across scenarios; each scenario
builds its own index because its corpus text differs.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional

from lmplatform.evaluation.plots import plot_recall_curves
from lmplatform.evaluation.retrieval_validation import build_retrieval_set, summarize
from lmplatform.evaluation.retrieval_validation import evaluate_model as rank_queries
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig, StageEvaluationResult
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from lmplatform.evaluation.tasks.retrieval.config import RetrievalTask, RetrieverSpec
from lmplatform.evaluation.tasks.retrieval.data import load_retrieval_data, scenario_inputs
from lmplatform.markdown import markdown_table
from lmplatform.metrics.retrieval import retrieval_report
from lmplatform.retrieval.index import IndexParams
from lmplatform.retrieval.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Retriever, TwoStageRetriever
from lmplatform.retrieval.settings import FusionSettings, RetrievalValidationConfig

logger = logging.getLogger(__name__)
TABLE_METRICS = ("recall@1", "recall@5", "recall@10", "recall@20", "mrr@5", "mrr@15", "map", "p@1")


def build_retriever(spec: RetrieverSpec, models: ModelCache) -> Retriever:
    def first_stage(kind: str) -> Retriever:
        if kind == "bm25":
            return BM25Retriever()
        dense = DenseRetriever(models.encoder(spec), IndexParams(kind=spec.index), batch_size=spec.batch_size, show_progress=True)
        return HybridRetriever(dense, settings=spec.hybrid) if kind == "hybrid" else dense

    if spec.kind != "two_stage":
        return first_stage(spec.kind)
    return TwoStageRetriever(first_stage(spec.first_stage), models.reranker(spec.reranker or ""), candidates=spec.candidates,
                             rerank_weight=spec.rerank_weight)


def _fused_with(retriever: Retriever, settings: FusionSettings) -> Retriever:
    """The retriever (or its first stage) fusing with `settings` from now on; others are returned as they are."""
    hybrid = retriever.first_stage if isinstance(retriever, TwoStageRetriever) else retriever
    if isinstance(hybrid, HybridRetriever):
        hybrid.settings = settings
    return retriever


def run(task: RetrievalTask, output_dir: Path, models: Optional[ModelCache] = None) -> TaskResult:
    models = models or ModelCache()
    k_max = max(task.ks + task.mrr_ks)
    results: list[dict[str, Any]] = []
    for ds in task.datasets:
        data = load_retrieval_data(ds)
        for scenario in task.scenarios:
            inputs = scenario_inputs(data, ds, scenario)
            for spec in task.retrievers:
                retriever = build_retriever(spec, models)
                start = time.perf_counter()
                retriever.index(inputs.corpus_ids, inputs.corpus_texts)
                index_seconds = time.perf_counter() - start
                for name, fusion in spec.variants():
                    start = time.perf_counter()
                    hits = _fused_with(retriever, fusion).search(inputs.query_texts, k_max, exclude=inputs.exclude)
                    search_seconds = time.perf_counter() - start
                    rankings = {q: [d for d, _ in row] for q, row in zip(inputs.query_ids, hits)}
                    report = retrieval_report(rankings, inputs.qrels, ks=task.ks, mrr_ks=task.mrr_ks)
                    row = {
                        "dataset": ds.name, "scenario": scenario.name, "retriever": name, "kind": spec.kind,
                        "corpus_size": len(inputs.corpus_ids), "index_seconds": round(index_seconds, 3),
                        "search_seconds": round(search_seconds, 3),
                        "queries_per_second": round(len(inputs.query_ids) / max(search_seconds, 1e-9), 2),
                        **report.to_dict(), "dataset_counts": data.counts,
                    }
                    if "hybrid" in (spec.kind, spec.first_stage if spec.kind == "two_stage" else None):
                        row["fusion"] = fusion.model_dump()
                    logger.info("%s / %s / %s: %s", ds.name, scenario.name, name,
                                {k: round(v, 4) for k, v in report.metrics.items() if k in TABLE_METRICS})
                    results.append(row)
    metrics = {
        f"{r['dataset']}.{r['scenario']}.{r['retriever']}.{name}": value
        for r in results for name, value in r["metrics"].items()
    }
    artifacts = plot_recall_curves(results, task.ks, output_dir)
    return TaskResult("retrieval", metrics, retrieval_section(results),
                      {"results": results, "ks": task.ks, "mrr_ks": task.mrr_ks}, artifacts)


def retrieval_section(results: list[dict[str, Any]]) -> str:
    """The report's retrieval section: a line per dataset x scenario x retriever, and how to read it."""
    present = [m for m in TABLE_METRICS if m in results[0]["metrics"]]
    header = ["dataset", "scenario", "retriever", "queries", "corpus", *present]
    rows = [[r["dataset"], r["scenario"], r["retriever"], str(r["queries_evaluated"]), str(r["corpus_size"]),
             *(f"{r['metrics'][m]:.4f}" for m in present)] for r in results]
    skipped = sum(r["queries_skipped_no_relevant"] for r in results)
    lines = ["## Retrieval", "", markdown_table(header, rows)]
    lines += ["", "Recall@K is the fraction of a query's relevant reports in the top K; MAP over the full returned "
              f"list (top {max(int(k.split('@')[1]) for k in results[0]['metrics'] if k.startswith('recall@'))}). "
              f"Queries skipped because no relevant report is in the searched corpus: {skipped}."]
    return "\n".join(lines) + "\n"


def evaluate_model(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
    """One model as a bi-encoder (a pipeline stage's evaluation): each query of `cfg.data`'s pairs ranked against the
    pool by retrieval_validation's rules (group relevance, ties against the query, distractors); the score for R is
    MRR@mrr_k. `head_from` is not used."""
    from lmplatform.models.encoder import Encoder

    settings = cfg.retrieval or RetrievalValidationConfig()
    rset = build_retrieval_set(settings, cfg.data)
    encoder = Encoder.from_pretrained(model_dir, max_seq_length=cfg.max_seq_length)
    metrics = summarize(rank_queries(encoder, rset, settings), rset)
    return StageEvaluationResult(metrics, score=metrics[f"ir_mrr_at_{settings.mrr_k}"])
