"""Retrieval validation in the online protocol: a hand-checked timeline where a later report never counts, the
window bounds the candidates, a duplicate group counts once, and the metrics keep the validation's names."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from lmplatform.config.schema import DataConfig
from lmplatform.data.pairs import Pair
from lmplatform.evaluation.online_validation import MaskSet, bucket_rank_of
from lmplatform.evaluation.retrieval_validation import (
    build_retrieval_set,
    dense_rankings,
    online_set_from_pairs,
    retrieval_set_from_pairs,
    score_rankings,
)
from lmplatform.evaluation.system import SystemScorer
from lmplatform.retrieval.settings import DistractorConfig, RetrievalValidationConfig, SearchSettings
from tests.evaluation.test_retrieval_validation import TableEncoder

DAY = 86400.0
# filing day of each report, in reports-file order; "notime" has none
DAYS = {"old": 0, "master": 500, "twin a": 502, "twin b": 503, "noise": 505, "dup one": 510, "query": 520,
        "later": 530, "notime": None}
TIMES = {t: None if d is None else d * DAY for t, d in DAYS.items()}
# "query" duplicates "master" (and "dup one", an earlier duplicate of it); "twin a"/"twin b" are another group
QUERY_PAIRS = [Pair("query", "master"), Pair("notime", "twin a")]
ALL_PAIRS = [*QUERY_PAIRS, Pair("dup one", "master"), Pair("twin a", "twin b")]
DISTRACTORS = [t for t in DAYS if t != "master"]
# each text's score against "query" (a unit vector [s, sqrt(1 - s²)] against [1, 0])
SCORES = {"query": 1.0, "later": 0.99, "notime": 0.97, "old": 0.95, "twin a": 0.9, "twin b": 0.85, "noise": 0.8,
          "dup one": 0.7, "master": 0.3}
VECTORS = {t: [s, math.sqrt(1 - s * s)] for t, s in SCORES.items()}
CFG = RetrievalValidationConfig(recall_ks=[1, 3], mrr_k=3, ndcg_k=3, map_k=5, protocol="online",
                                distractors=DistractorConfig(paths=["unused.jsonl"]))


def _metrics(window_days: float | None) -> dict[str, list[float]]:
    cfg = CFG.model_copy(update={"window_days": window_days})
    rset = online_set_from_pairs(ALL_PAIRS, QUERY_PAIRS, DISTRACTORS, TIMES, cfg)
    vectors = TableEncoder(VECTORS).encode([*rset.query_texts, *rset.candidate_texts])
    q = len(rset.query_texts)
    rankings = dense_rankings(vectors[:q], vectors[q:], rset, cfg.depth())
    return {name: values.tolist() for name, values in score_rankings(rankings, rset, cfg).items()}


def test_the_query_is_the_later_end_and_unknown_times_are_neither_query_nor_candidate() -> None:
    rset = online_set_from_pairs(ALL_PAIRS, QUERY_PAIRS, DISTRACTORS, TIMES, CFG)
    assert rset.query_texts == ["query"]  # ("notime", "twin a"): notime has no time, twin a is its group's earliest
    assert rset.counts["pairs_without_query"] == 1 and rset.counts["unknown_time"] == 1
    inside = {rset.candidate_texts[i] for i in range(len(rset.candidate_texts)) if i not in rset.excluded[0]}
    assert inside == {"master", "twin a", "twin b", "noise", "dup one"}  # not old (window), later, notime, itself
    assert {rset.candidate_texts[i] for i in rset.relevant[0]} == {"master", "dup one"}


def test_a_later_report_never_counts_and_a_group_is_one_bucket() -> None:
    # in the window: twin a .9, twin b .85 (one bucket), noise .8, then dup one .7: the relevant group is third
    assert _metrics(365.0) == {"ir_rr_at_1": [0.0], "ir_rr_at_3": [1.0], "ir_mrr_at_3": [1 / 3], "ir_map_at_5": [1 / 3]}


def test_the_window_bounds_the_candidates() -> None:
    assert _metrics(None)["ir_map_at_5"] == [0.25]  # "old", 520 days earlier, now ranks too
    assert _metrics(15.0)["ir_map_at_5"] == [0.5]  # 15 days inclusive: noise (day 505) and dup one (510) only
    assert _metrics(5.0) == {"ir_rr_at_1": [0.0], "ir_rr_at_3": [0.0], "ir_mrr_at_3": [0.0], "ir_map_at_5": [0.0]}
    cfg = CFG.model_copy(update={"window_days": 5.0})
    assert online_set_from_pairs(ALL_PAIRS, QUERY_PAIRS, DISTRACTORS, TIMES, cfg).counts[
        "queries_without_earlier_relevant"] == 1


def test_bucket_rank_of_a_ranking() -> None:
    buckets = np.array([0, 1, 1, 2, 3])
    assert bucket_rank_of([1, 2, 3, 0], {0}, buckets) == 3  # 1 and 2 are one bucket
    assert bucket_rank_of([1, 3], {0}, buckets) is None  # not ranked: a miss
    excluded = MaskSet(np.array([True, False, True]))
    assert list(excluded) == [0, 2] and len(excluded) == 2 and 2 in excluded and 1 not in excluded and 7 not in excluded


def test_config_names_the_online_metrics_and_refuses_what_the_protocol_cannot_rank() -> None:
    assert CFG.ranking_metric_names() == ("ir_rr_at_1", "ir_rr_at_3", "ir_mrr_at_3", "ir_map_at_5")
    assert RetrievalValidationConfig().protocol == "corpus" and "ir_ndcg_at_10" in RetrievalValidationConfig().metric_names()
    with pytest.raises(ValidationError, match="protocol 'online' needs distractors"):
        RetrievalValidationConfig(protocol="online")
    with pytest.raises(ValidationError, match="relevance must be 'group'"):
        CFG.model_validate({**CFG.model_dump(), "relevance": "pair"})
    with pytest.raises(ValidationError, match="protocol"):
        RetrievalValidationConfig(protocol="offline")


def test_build_from_files_reads_the_times_of_the_distractor_rows(tmp_path: Path) -> None:
    def jsonl(name: str, rows: list[dict]) -> str:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(tmp_path / name)

    pairs = jsonl("pairs.jsonl", [{"query": "first bug", "document": "second bug"}])
    reports = jsonl("reports.jsonl", [{"text": "first bug", "created": "2020-01-01T00:00:00Z"},
                                      {"text": "second bug", "created": "2020-01-05T00:00:00Z"},
                                      {"text": "other", "created": "not a time"}])
    cfg = CFG.model_copy(update={"pairs": DataConfig(train_paths=[pairs]), "split": "all",
                                 "distractors": DistractorConfig(paths=[reports])})
    rset = build_retrieval_set(cfg)
    assert rset.query_texts == ["second bug"]  # the later-filed end of the pair
    assert rset.counts["junk_time"] == 1 and rset.counts["unknown_time"] == 1
    corpus = build_retrieval_set(cfg.model_copy(update={"protocol": "corpus"}))
    assert corpus.buckets is None and corpus.fingerprint() != rset.fingerprint()


def test_the_system_stage_chooses_on_the_online_protocol() -> None:
    rset = online_set_from_pairs(ALL_PAIRS, QUERY_PAIRS, DISTRACTORS, TIMES, CFG)
    scorer = SystemScorer(TableEncoder(VECTORS), rset, CFG)
    hits = scorer.hits(SearchSettings(mode="dense"))[0]
    assert [rset.candidate_texts[i] for i, _ in hits] == ["twin a", "twin b", "noise", "dup one", "master"]
    choice = scorer.choose(SearchSettings(mode="hybrid"), bm25_weights=[0.0, 1.0], metric="ir_mrr_at_3")
    assert set(choice.tried[0]["metrics"]) >= {"ir_rr_at_1", "ir_mrr_at_3", "ir_map_at_5", "ir_queries"}
    assert scorer.means(SearchSettings(mode="dense"))["ir_mrr_at_3"] == pytest.approx(1 / 3)
    corpus = retrieval_set_from_pairs(ALL_PAIRS, QUERY_PAIRS, DISTRACTORS, CFG.model_copy(update={"protocol": "corpus"}))
    assert corpus.buckets is None
