"""The retrieval evaluation: as an `lmp evaluate` task, every dataset x scenario x retriever scored with
`retrieval_report` (a dataset with protocol: online with `evaluation.online.evaluate_online`); as a pipeline
stage's evaluation, one model ranking a pairs file's queries (`evaluate_model`).

Models are loaded once per path and shared across scenarios; each scenario
builds its own index because its corpus text differs.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from lmplatform.evaluation.online import evaluate_online
from lmplatform.evaluation.plots import plot_recall_curves
from lmplatform.evaluation.retrieval_validation import build_retrieval_set, summarize
from lmplatform.evaluation.retrieval_validation import evaluate_model as rank_queries
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig, StageEvaluationResult
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset, RetrievalTask, RetrieverSpec
from lmplatform.evaluation.tasks.retrieval.data import RetrievalData, load_retrieval_data, scenario_inputs
from lmplatform.evaluation.tasks.retrieval.online_data import OnlineInputs, online_inputs
from lmplatform.markdown import markdown_table
from lmplatform.metrics.retrieval import retrieval_report
from lmplatform.retrieval.index import IndexParams
from lmplatform.retrieval.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Retriever, TwoStageRetriever
from lmplatform.retrieval.settings import FusionSettings, RetrievalValidationConfig

logger = logging.getLogger(__name__)
TABLE_METRICS = ("recall@1", "recall@5", "recall@10", "recall@20", "rr@1", "rr@5", "rr@10", "rr@20", "mrr@5", "mrr@10",
                 "mrr@15", "map", "p@1")


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


def online_scorer(retriever: Retriever, inputs: OnlineInputs, depth: int) -> Callable[[np.ndarray], np.ndarray]:
    """`evaluate_online`'s score_fn for an indexed retriever: batch int64 [b] (timeline positions of queries) ->
    float [b, reports], -inf for reports outside the searched corpus.

    BM25: its score of every document (`query_scores`, 0 where no query term occurs). Dense: the inner product of
    the encoded query with every stored vector (`VectorIndex.reconstruct`; exact even for an approximate index).
    Hybrid and two-stage (no score for every document): their top `depth` hits, the documents below scoring -inf,
    which is exact for the bucket ranks up to k unless the top `depth` reports fall into fewer than k buckets.
    """
    size, columns = len(inputs.timeline), inputs.corpus_positions
    full: Callable[[list[str]], np.ndarray]
    if isinstance(retriever, BM25Retriever):
        def full(texts: list[str]) -> np.ndarray:
            return np.vstack(retriever.query_scores(texts))
    elif isinstance(retriever, DenseRetriever) and retriever.vector_index is not None:
        vectors = retriever.vector_index.reconstruct(inputs.corpus_ids)  # [corpus, dim]

        def full(texts: list[str]) -> np.ndarray:
            return np.asarray(retriever.encoder.encode(texts, batch_size=retriever.batch_size)) @ vectors.T
    else:
        where = {doc: n for n, doc in enumerate(inputs.corpus_ids)}

        def full(texts: list[str]) -> np.ndarray:
            out = np.full((len(texts), len(where)), -np.inf)
            for row, hits in zip(out, retriever.search(texts, min(depth, len(where)))):
                row[[where[doc] for doc, _ in hits]] = [score for _, score in hits]
            return out

    def score_fn(batch: np.ndarray) -> np.ndarray:
        scores = np.full((len(batch), size), -np.inf)
        scores[:, columns] = full([inputs.query_texts[int(q)] for q in batch])
        return scores

    return score_fn


def _indexed(spec: RetrieverSpec, models: ModelCache, ids: list[str], texts: list[str]) -> tuple[Retriever, float]:
    """The spec's retriever over the corpus, and the seconds indexing took."""
    retriever = build_retriever(spec, models)
    start = time.perf_counter()
    retriever.index(ids, texts)
    return retriever, time.perf_counter() - start


def _online_rows(task: RetrievalTask, ds: RetrievalDataset, data: RetrievalData, models: ModelCache) -> list[dict[str, Any]]:
    """One row per scenario x retriever (x fusion variant) of a dataset under the online protocol."""
    rows = []
    mrr_ks = sorted(set(task.mrr_ks) | {10})
    for scenario in task.scenarios:
        inputs = online_inputs(data, ds, scenario)
        for spec in task.retrievers:
            retriever, index_seconds = _indexed(spec, models, inputs.corpus_ids, inputs.corpus_texts)
            for name, fusion in spec.variants():
                start = time.perf_counter()
                report = evaluate_online(inputs.timeline, inputs.queries,
                                         online_scorer(_fused_with(retriever, fusion), inputs, ds.online_depth),
                                         ks=task.ks, window_days=ds.window_days, mrr_ks=mrr_ks,
                                         batch_size=spec.batch_size)
                search_seconds = time.perf_counter() - start
                row = {
                    "dataset": ds.name, "scenario": scenario.name, "retriever": name, "kind": spec.kind,
                    "protocol": "online", "corpus_size": len(inputs.corpus_ids), "index_seconds": round(index_seconds, 3),
                    "search_seconds": round(search_seconds, 3),
                    "queries_per_second": round(len(inputs.queries) / max(search_seconds, 1e-9), 2),
                    **report.to_dict(per_query=True), "queries_evaluated": report.counts["queries"],
                    "queries_skipped_no_relevant": 0, "dataset_counts": {**data.counts, **inputs.counts},
                }
                if "hybrid" in (spec.kind, spec.first_stage if spec.kind == "two_stage" else None):
                    row["fusion"] = fusion.model_dump()
                logger.info("%s / %s / %s (online): %s", ds.name, scenario.name, name,
                            {k: round(v, 4) for k, v in report.metrics.items() if k in TABLE_METRICS})
                rows.append(row)
    return rows


def run(task: RetrievalTask, output_dir: Path, models: Optional[ModelCache] = None) -> TaskResult:
    models = models or ModelCache()
    k_max = max(task.ks + task.mrr_ks)
    results: list[dict[str, Any]] = []
    for ds in task.datasets:
        data = load_retrieval_data(ds)
        if ds.protocol == "online":
            results.extend(_online_rows(task, ds, data, models))
            continue
        for scenario in task.scenarios:
            inputs = scenario_inputs(data, ds, scenario)
            for spec in task.retrievers:
                retriever, index_seconds = _indexed(spec, models, inputs.corpus_ids, inputs.corpus_texts)
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
    # online rows plot their recall rate (rr@k: the relevant bucket in the top k) as the curve against K
    artifacts = plot_recall_curves([{**r, "metrics": {f"recall@{k}": r["metrics"][f"rr@{k}"] for k in task.ks}}
                                    if r.get("protocol") == "online" else r for r in results], task.ks, output_dir)
    return TaskResult("retrieval", metrics, retrieval_section(results),
                      {"results": results, "ks": task.ks, "mrr_ks": task.mrr_ks}, artifacts)


def retrieval_section(results: list[dict[str, Any]]) -> str:
    """The report's retrieval section: a line per dataset x scenario x retriever, and how to read it."""
    corpus = [r for r in results if r.get("protocol") != "online"]
    online = [r for r in results if r.get("protocol") == "online"]
    lines = ["## Retrieval"]
    for rows_of, note in ((corpus, _corpus_note), (online, _online_note)):
        if not rows_of:
            continue
        present = [m for m in TABLE_METRICS if m in rows_of[0]["metrics"]]
        header = ["dataset", "scenario", "retriever", "queries", "corpus", *present]
        rows = [[r["dataset"], r["scenario"], r["retriever"], str(r["queries_evaluated"]), str(r["corpus_size"]),
                 *(f"{r['metrics'][m]:.4f}" for m in present)] for r in rows_of]
        lines += ["", markdown_table(header, rows), "", note(rows_of)]
    return "\n".join(lines) + "\n"


def _corpus_note(results: list[dict[str, Any]]) -> str:
    skipped = sum(r["queries_skipped_no_relevant"] for r in results)
    return ("Recall@K is the fraction of a query's relevant reports in the top K; MAP over the full returned "
            f"list (top {max(int(k.split('@')[1]) for k in results[0]['metrics'] if k.startswith('recall@'))}). "
            f"Queries skipped because no relevant report is in the searched corpus: {skipped}.")


def _online_note(results: list[dict[str, Any]]) -> str:
    windows = sorted({str(r["window_days"]) for r in results})
    misses = sum(r["counts"]["misses_outside_window"] for r in results)
    unknown = sum(r["counts"]["unknown_time"] for r in results)
    return ("Online protocol (Sun et al. 2011): each query, a report duplicating an earlier one, ranks the buckets "
            f"(duplicate groups) of the reports filed before it within {', '.join(windows)} days; RR@K is the fraction "
            "of queries whose bucket is in the top K, MRR@K its reciprocal rank (0 beyond K), MAP = MRR without "
            f"cut-off. Queries whose earlier duplicates all lie outside the window count as misses: {misses}; "
            f"reports of unknown time (neither query nor candidate), summed over rows: {unknown}.")


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
