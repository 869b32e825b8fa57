"""Fusing rankings: BM25 with dense retrieval (convex mix or reciprocal rank fusion), a re-ranker with its first stage.

Pure functions over one query's hits. A *hit list* is [(id, score), ...] best first; every result is
ordered by `rank_by_score` (higher score first, equal scores by smaller id). The same functions serve
`HybridRetriever`, the served `/v1/search` and corpus-level validation, so offline and online agree.

The candidate pool of a query is the union of each retriever's top-N hits. A candidate one retriever
did not return still has an exact score from it (`exact_scores`): the dense score is the inner product
of the query with the document's stored vector, the BM25 score is the document's BM25 score for the
query, 0 when it holds no query term. So a candidate is never scored as "missing".
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from lmplatform.metrics.retrieval import rank_by_score
from lmplatform.retrieval.settings import FusionSettings

Hits = list[tuple[str, float]]
ExactScores = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]


def minmax(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Per-query min-max normalisation: norm(s)_i = (s_i - min s) / (max s - min s).

    scores: [n] -> [n] float64 in [0, 1], order kept. When every score is equal (or n = 1) the list
    tells the candidates apart in no way, and all are 0: it adds nothing to a mix.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high = values.min(), values.max()
    if high <= low:
        return np.zeros_like(values)
    return (values - low) / (high - low)


def convex_scores(dense: Sequence[float] | np.ndarray, bm25: Sequence[float] | np.ndarray, bm25_weight: float) -> np.ndarray:
    """fused_i = (1 - w)·norm(dense)_i + w·norm(bm25)_i, with `minmax` as norm and w = bm25_weight in [0, 1].

    dense, bm25: [n] exact scores of the same n pool candidates -> [n]. w = 0 leaves norm(dense) exactly
    (the dense order), w = 1 norm(bm25) exactly (BM25's order).
    """
    if not 0.0 <= bm25_weight <= 1.0:
        raise ValueError(f"bm25_weight must be in [0, 1], got {bm25_weight}")
    dense, bm25 = np.asarray(dense, dtype=np.float64), np.asarray(bm25, dtype=np.float64)
    if dense.shape != bm25.shape or dense.ndim != 1:
        raise ValueError(f"dense and bm25 scores must be [n] of one pool, got {list(dense.shape)} and {list(bm25.shape)}")
    return (1.0 - bm25_weight) * minmax(dense) + bm25_weight * minmax(bm25)


def candidate_pool(*hit_lists: Sequence[tuple[str, float]]) -> list[str]:
    """The union of the lists' ids, in order of first appearance."""
    return list(dict.fromkeys(doc for hits in hit_lists for doc, _ in hits))


def convex_fusion(dense_hits: Sequence[tuple[str, float]], bm25_hits: Sequence[tuple[str, float]],
                  exact_scores: ExactScores, bm25_weight: float) -> Hits:
    """The pool (union of both top-N lists) ranked by `convex_scores` of every member's exact scores.

    exact_scores(pool) -> (dense [n], bm25 [n]) for the n pool ids (see the module doc).
    """
    pool = candidate_pool(dense_hits, bm25_hits)
    if not pool:
        return []
    dense, bm25 = exact_scores(pool)
    return rank_by_score(zip(pool, convex_scores(dense, bm25, bm25_weight).tolist()))


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], rrf_k: int = 60) -> Hits:
    """RRF(d) = Σ_r 1 / (rrf_k + rank_r(d)) over the rankings r that hold d (rank 1 = best).

    rankings: lists of ids best first (e.g. each retriever's top N); an id absent from a list gets nothing
    from it. Returns every id of any list, ranked by its RRF score.
    """
    if rrf_k < 1:
        raise ValueError(f"rrf_k must be >= 1, got {rrf_k}")
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(dict.fromkeys(ranking), start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (rrf_k + rank)
    return rank_by_score(fused.items())


def fuse(dense_hits: Sequence[tuple[str, float]], bm25_hits: Sequence[tuple[str, float]], exact_scores: ExactScores,
         settings: FusionSettings) -> Hits:
    """One query's fused ranking of its pool, by `settings.fusion` (convex with `bm25_weight`, or rrf with `rrf_k`)."""
    if settings.fusion == "rrf":
        return reciprocal_rank_fusion([[d for d, _ in dense_hits], [d for d, _ in bm25_hits]], settings.rrf_k)
    return convex_fusion(dense_hits, bm25_hits, exact_scores, settings.bm25_weight)


def combine_rerank(first_stage: Sequence[tuple[str, float]], reranker_scores: Sequence[float] | np.ndarray,
                   rerank_weight: float) -> Hits:
    """A re-ranker mixed with its first stage over the first stage's top `depth` hits.

    first_stage: [m] hits best first; reranker_scores: [depth] scores of first_stage[:depth], depth <= m.
    final_i = (1 - v)·norm(first)_i + v·norm(reranker)_i for i < depth (norm = `minmax` over those depth
    hits, v = rerank_weight); those are ranked by final score, and first_stage[depth:] follow in their own
    order with their first-stage scores. v = 1 gives the re-ranker's order, v = 0 the first stage's.
    """
    if not 0.0 <= rerank_weight <= 1.0:
        raise ValueError(f"rerank_weight must be in [0, 1], got {rerank_weight}")
    depth = len(reranker_scores)
    if depth > len(first_stage):
        raise ValueError(f"{depth} re-ranker scores for {len(first_stage)} first-stage hits")
    top = first_stage[:depth]
    first = minmax([score for _, score in top])
    final = (1.0 - rerank_weight) * first + rerank_weight * minmax(reranker_scores)
    return rank_by_score(zip([doc for doc, _ in top], final.tolist())) + [(d, float(s)) for d, s in first_stage[depth:]]
