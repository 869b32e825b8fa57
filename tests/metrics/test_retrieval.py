import math

import pytest

from lmplatform.metrics.retrieval import (
    average_precision,
    hit_at_k,
    mean_average_precision,
    mrr_at_k,
    precision_at_k,
    rank_by_score,
    recall_at_k,
    retrieval_report,
)

RANKING = ["a", "b", "c", "d", "e"]


def test_single_relevant_hand_computed():
    assert recall_at_k(RANKING, {"c"}, 1) == 0.0
    assert recall_at_k(RANKING, {"c"}, 3) == 1.0
    assert mrr_at_k(RANKING, {"c"}, 5) == pytest.approx(1 / 3)
    assert mrr_at_k(RANKING, {"c"}, 2) == 0.0  # not in the top k
    assert average_precision(RANKING, {"c"}) == pytest.approx(1 / 3)
    assert precision_at_k(RANKING, {"a"}, 1) == 1.0


def test_many_relevant_hand_computed():
    relevant = {"b", "d", "z"}  # z is never retrieved
    assert recall_at_k(RANKING, relevant, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKING, relevant, 5) == pytest.approx(2 / 3)
    assert hit_at_k(RANKING, relevant, 1) == 0.0
    assert hit_at_k(RANKING, relevant, 2) == 1.0
    assert mrr_at_k(RANKING, relevant, 5) == pytest.approx(0.5)
    # AP = (1/2 + 2/4) / 3
    assert average_precision(RANKING, relevant) == pytest.approx((0.5 + 0.5) / 3)
    assert average_precision(RANKING, relevant, k=3) == pytest.approx(0.5 / 3)
    assert precision_at_k(RANKING, relevant, 4) == pytest.approx(0.5)


def test_no_relevant_in_top_k_scores_zero():
    assert recall_at_k(RANKING, {"x"}, 5) == 0.0
    assert mrr_at_k(RANKING, {"x"}, 5) == 0.0
    assert average_precision(RANKING, {"x"}) == 0.0


def test_duplicate_ids_count_once():
    assert precision_at_k(["a", "a", "b"], {"a"}, 2) == pytest.approx(0.5)
    assert average_precision(["a", "a", "b"], {"a", "b"}) == pytest.approx(1.0)


def test_ties_ordered_by_id():
    ranked = rank_by_score([("d2", 0.5), ("d1", 0.5), ("d3", 0.9)])
    assert [doc for doc, _ in ranked] == ["d3", "d1", "d2"]


def test_empty_relevance_and_bad_k_raise():
    with pytest.raises(ValueError, match="empty"):
        recall_at_k(RANKING, set(), 5)
    with pytest.raises(ValueError, match="positive"):
        mrr_at_k(RANKING, {"a"}, 0)


def test_report_aggregates_skips_and_counts():
    rankings = {"q1": ["a", "b", "c"], "q2": ["c", "b", "a"], "q3": ["a"]}
    qrels = {"q1": {"a"}, "q2": {"a", "b"}, "q3": set(), "q4": {"a"}}
    report = retrieval_report(rankings, qrels, ks=(1, 3), mrr_ks=(5,))
    assert report.queries_evaluated == 3
    assert report.queries_skipped_no_relevant == 1
    assert report.queries_without_ranking == 1  # q4 scores 0 everywhere
    m = report.metrics
    assert m["recall@1"] == pytest.approx((1 + 0 + 0) / 3)
    assert m["recall@3"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["mrr@5"] == pytest.approx((1 + 0.5 + 0) / 3)
    # q2 finds its two relevant at ranks 2 and 3 of 3: DCG 1/log2(3) + 1/log2(4) against the ideal 1 + 1/log2(3)
    q2_ndcg = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert m["ndcg@3"] == pytest.approx((1 + q2_ndcg + 0) / 3) and m["ndcg@1"] == pytest.approx(1 / 3)
    # q2 AP = (1/2 + 2/3) / 2
    assert m["map"] == pytest.approx((1 + (0.5 + 2 / 3) / 2 + 0) / 3)
    assert m["p@1"] == pytest.approx(1 / 3)
    assert mean_average_precision(rankings, qrels) == pytest.approx(m["map"])
    with pytest.raises(ValueError, match="no query"):
        retrieval_report(rankings, {"q": set()})
