"""Fusion by hand on small score matrices: convex mix of min-max scores, RRF, and a re-ranker combined with its first stage."""
from __future__ import annotations

import numpy as np
import pytest

from lmplatform.metrics.retrieval import rank_by_score
from lmplatform.retrieval.fusion import combine_rerank, convex_fusion, convex_scores, fuse, minmax, reciprocal_rank_fusion
from lmplatform.retrieval.settings import FusionSettings

IDS = ["a", "b", "c", "d"]
DENSE = np.array([0.9, 0.5, 0.1, 0.7])  # norm: a 1, b 0.5, c 0, d 0.75
BM25 = np.array([0.0, 4.0, 2.0, 1.0])  # norm: a 0, b 1, c 0.5, d 0.25


def _exact(dense: np.ndarray, bm25: np.ndarray, ids: list[str]):
    """exact_scores over a score matrix row: the scores of any pool member, as the retrievers look them up."""
    where = {doc: n for n, doc in enumerate(ids)}
    return lambda pool: (dense[[where[d] for d in pool]], bm25[[where[d] for d in pool]])


def _top(scores: np.ndarray, ids: list[str], n: int, positive: bool = False) -> list[tuple[str, float]]:
    ranked = rank_by_score((doc, float(s)) for doc, s in zip(ids, scores) if s > 0 or not positive)
    return ranked[:n]


def test_minmax_by_hand_and_a_constant_list_adds_nothing() -> None:
    assert minmax(DENSE).tolist() == pytest.approx([1.0, 0.5, 0.0, 0.75])
    assert minmax([3.0, 3.0]).tolist() == [0.0, 0.0] and minmax([5.0]).tolist() == [0.0]
    assert minmax([]).size == 0


def test_convex_mix_by_hand_with_ties_broken_by_id() -> None:
    assert convex_scores(DENSE, BM25, 0.5).tolist() == pytest.approx([0.5, 0.75, 0.25, 0.5])
    exact = _exact(DENSE, BM25, IDS)
    everything = [(d, 0.0) for d in IDS]
    # a and d tie at 0.5: the smaller id first
    assert [d for d, _ in convex_fusion(everything, [], exact, 0.5)] == ["b", "a", "d", "c"]
    assert [d for d, _ in convex_fusion(everything, [], exact, 0.0)] == ["a", "d", "b", "c"]
    assert [d for d, _ in convex_fusion(everything, [], exact, 1.0)] == ["b", "c", "d", "a"]
    with pytest.raises(ValueError, match="bm25_weight must be in"):
        convex_scores(DENSE, BM25, 1.5)
    with pytest.raises(ValueError, match="one pool"):
        convex_scores(DENSE, BM25[:3], 0.5)


def test_the_pool_is_the_union_and_a_missing_candidate_gets_its_exact_score() -> None:
    """d is in neither top-1 list; c only in BM25's: its dense score (0.1, the pool's lowest) is looked up, not 0."""
    exact = _exact(DENSE, BM25, IDS)
    fused = convex_fusion(_top(DENSE, IDS, 1), [("b", 4.0), ("c", 2.0)], exact, 0.5)
    # pool a, b, c; dense 0.9 / 0.5 / 0.1 -> 1, 0.5, 0; bm25 0 / 4 / 2 -> 0, 1, 0.5
    assert fused == [("b", pytest.approx(0.75)), ("a", pytest.approx(0.5)), ("c", pytest.approx(0.25))]


@pytest.mark.parametrize("seed", range(5))
def test_weight_0_is_exactly_the_dense_ranking_and_1_exactly_bm25s(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = [f"doc{i}" for i in range(40)]
    dense = rng.normal(size=40).round(2)  # rounded: ties occur, and must be broken by id in every list
    bm25 = np.where(rng.random(40) < 0.5, 0.0, rng.gamma(2.0, size=40).round(1))
    exact, n, k = _exact(dense, bm25, ids), 15, 8
    dense_top, bm25_top = _top(dense, ids, n), _top(bm25, ids, n, positive=True)
    assert len(bm25_top) >= k
    at_0 = convex_fusion(dense_top, bm25_top, exact, 0.0)
    at_1 = convex_fusion(dense_top, bm25_top, exact, 1.0)
    assert [d for d, _ in at_0[:n]] == [d for d, _ in _top(dense, ids, n)]
    assert [d for d, _ in at_1[:k]] == [d for d, _ in bm25_top[:k]]


def test_reciprocal_rank_fusion_by_hand() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]], rrf_k=60)
    assert fused == [("a", pytest.approx(1 / 61 + 1 / 62)), ("c", pytest.approx(1 / 63 + 1 / 61)),
                     ("b", pytest.approx(1 / 62)), ("d", pytest.approx(1 / 63))]
    assert [d for d, _ in reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]], rrf_k=1)] == ["a", "c", "b", "d"]
    assert reciprocal_rank_fusion([["b"], ["a"]]) == [("a", pytest.approx(1 / 61)), ("b", pytest.approx(1 / 61))]
    settings = FusionSettings(fusion="rrf", rrf_k=1)
    assert [d for d, _ in fuse([("a", 9.0), ("b", 1.0)], [("b", 3.0)], lambda pool: pytest.fail("rrf needs no scores"),
                               settings)] == ["b", "a"]  # b: 1/3 + 1/2; a: 1/2
    with pytest.raises(ValueError, match="rrf_k"):
        reciprocal_rank_fusion([["a"]], rrf_k=0)


def test_rerank_combine_by_hand() -> None:
    first = [("a", 0.9), ("b", 0.8), ("c", 0.5), ("d", 0.4)]
    reranker = [0.1, 0.9, 0.5]  # of a, b, c: the top 3
    assert combine_rerank(first, reranker, 1.0) == [("b", 1.0), ("c", 0.5), ("a", 0.0), ("d", 0.4)]
    assert [d for d, _ in combine_rerank(first, reranker, 0.0)] == ["a", "b", "c", "d"]
    # v = 0.5: a 0.5·1 + 0.5·0, b 0.5·0.75 + 0.5·1, c 0 + 0.5·0.5; d stays below with its first-stage score
    assert combine_rerank(first, reranker, 0.5) == [("b", pytest.approx(0.875)), ("a", pytest.approx(0.5)),
                                                   ("c", pytest.approx(0.25)), ("d", 0.4)]
    # ties (equal re-ranker scores) are broken by id, as rank_by_score does
    assert [d for d, _ in combine_rerank([("b", 2.0), ("a", 1.0)], [0.3, 0.3], 1.0)] == ["a", "b"]
    with pytest.raises(ValueError, match="3 re-ranker scores for 2"):
        combine_rerank(first[:2], reranker, 1.0)
