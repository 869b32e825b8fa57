"""Corpus-level retrieval validation: tie-aware ranking, group relevance, and a collapsed encoder scoring 0."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lmplatform.config.schema import DataConfig
from lmplatform.data.pairs import Pair
from lmplatform.data.readers import DataError
from lmplatform.evaluation.retrieval_validation import (
    build_retrieval_set,
    choose_bm25_weight,
    dense_rankings,
    evaluate_model,
    hybrid_rankings,
    rank_against_query,
    retrieval_set_from_pairs,
    score_rankings,
    summarize,
)
from lmplatform.metrics.retrieval import ndcg_at_k
from lmplatform.retrieval.settings import DistractorConfig, RetrievalValidationConfig

CFG = RetrievalValidationConfig(recall_ks=[1, 3], mrr_k=3, ndcg_k=3, map_k=5)


def test_ties_count_against_the_query() -> None:
    # 7 ties with 3: the non-relevant tie goes first
    assert rank_against_query([3, 7, 1], [0.5, 0.5, 0.9], relevant={3}, complete=True) == [1, 7, 3]
    # not the whole pool: a relevant id at the lowest returned score may have unseen equals below the cut
    assert rank_against_query([3, 7, 1], [0.5, 0.5, 0.9], relevant={3}, complete=False) == [1, 7]
    assert rank_against_query([3, 7, 1], [0.6, 0.5, 0.9], relevant={3}, complete=False) == [1, 3, 7]


def test_ndcg_is_one_for_an_ideal_ranking_and_discounts_by_log_rank() -> None:
    assert ndcg_at_k(["a", "b", "c"], {"a", "b"}, 3) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "a"], {"a"}, 3) == pytest.approx(1 / np.log2(3))
    assert ndcg_at_k(["x", "y", "z", "a"], {"a"}, 3) == 0.0


def test_group_relevance_and_the_query_never_ranks_itself() -> None:
    # q1 and q2 are duplicates of d; q2's text is also in the pool (a distractor corpus holding every report)
    pairs = [Pair("q1", "d"), Pair("q2", "d"), Pair("q3", "e")]
    rset = retrieval_set_from_pairs(pairs, pairs[:2], ["q2", "x", "y"], CFG)
    index = {text: i for i, text in enumerate(rset.candidate_texts)}
    by_query = dict(zip(rset.query_texts, zip(rset.relevant, rset.excluded)))
    assert by_query["q1"] == ({index["d"], index["q2"]}, frozenset())
    assert by_query["q2"] == ({index["d"]}, {index["q2"]})
    pair_only = retrieval_set_from_pairs(pairs, pairs[:2], ["q2", "x"], CFG.model_copy(update={"relevance": "pair"}))
    assert all(rel == {pair_only.candidate_texts.index("d")} for rel in pair_only.relevant)


def test_planted_vectors_give_exact_metrics() -> None:
    pairs = [Pair("qa", "a"), Pair("qb", "b")]
    rset = retrieval_set_from_pairs(pairs, pairs, ["c", "d", "e"], CFG)
    candidates = {"a": [1, 0, 0], "b": [0, 1, 0], "c": [0.9, 0.1, 0], "d": [0, 0, 1], "e": [0, 0.5, 0.5]}
    queries = {"qa": [1, 0, 0], "qb": [0, 0.6, 0.8]}  # qa finds a first; qb ranks d, e above b
    vectors = lambda texts, table: np.array([table[t] for t in texts], dtype=np.float32)
    q = vectors(rset.query_texts, queries)
    c = vectors(rset.candidate_texts, candidates)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    per_query = score_rankings(dense_rankings(q, c, rset, CFG.depth()), rset, CFG)
    order = {text: i for i, text in enumerate(rset.query_texts)}
    assert per_query["ir_mrr_at_3"][order["qa"]] == 1.0
    assert per_query["ir_mrr_at_3"][order["qb"]] == pytest.approx(1 / 3)
    assert per_query["ir_recall_at_1"].tolist() == [1.0 if t == "qa" else 0.0 for t in rset.query_texts]
    means = summarize(per_query, rset)
    assert means["ir_queries"] == 2 and means["ir_candidates"] == 5


def _collapsed(encoder):
    import torch

    with torch.no_grad():
        for param in encoder.backbone.parameters():
            param.zero_()
    return encoder


def test_a_collapsed_encoder_scores_zero_not_one(tiny_bert: Path) -> None:
    from lmplatform.models.encoder import Encoder
    from lmplatform.objectives.biencoder.objective import InBatchRetrievalEvaluator, QueryDocumentCollator
    from lmplatform.objectives.infonce import Temperature

    words = "printer database login timeout crash server disk memory network error".split()
    pairs = [Pair(f"{a} {b} report", f"{a} {b} ticket") for a in words[:5] for b in words[5:]]
    rset = retrieval_set_from_pairs(pairs, pairs, [f"{w} notes" for w in words], CFG)
    encoder = _collapsed(Encoder.from_pretrained(tiny_bert))
    vectors = encoder.encode(["printer", "a much longer text about the network"])
    assert np.allclose(vectors[0], vectors[1])  # collapsed indeed
    means = summarize(evaluate_model(encoder, rset, CFG), rset)
    chance = 1 / len(rset.candidate_texts)
    assert means["ir_mrr_at_3"] <= chance and means["ir_recall_at_3"] <= chance
    # the in-batch diagnostic no longer rewards ties either (it used to score 1.0 here)
    collate = QueryDocumentCollator(encoder.tokenizer, 32)
    batch = collate({"query": np.array([p.query for p in pairs[:8]]), "document": np.array([p.document for p in pairs[:8]])})
    import torch

    with torch.inference_mode():  # as the loop runs every evaluator
        sums = InBatchRetrievalEvaluator(Temperature(0.05, learnable=False))(encoder, [batch])
    assert sums["inbatch_accuracy"][0] == 0.0 and sums["inbatch_mrr"][0] / sums["inbatch_mrr"][1] == pytest.approx(1 / 8)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_build_from_files_with_a_distractor_sample(tmp_path: Path) -> None:
    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"query": f"query {i}", "document": f"document {i}"} for i in range(40)])
    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"title": f"report {i}", "body": "text"} for i in range(50)]
                    + [{"title": "document 3"}])  # a report identical to a pair's document is one candidate
    cfg = RetrievalValidationConfig(
        pairs=DataConfig(train_paths=[str(pairs)], validation_fraction=0.5),
        distractors=DistractorConfig(paths=[str(corpus)], fields=["title", "body"]),
    )
    rset = build_retrieval_set(cfg)
    assert 0 < len(rset.query_texts) < 40
    assert len(rset.candidate_texts) == len(set(rset.candidate_texts))
    assert "report 7. text" in rset.candidate_texts
    sampled = build_retrieval_set(
        cfg.model_copy(update={"distractors": cfg.distractors.model_copy(update={"max_documents": 10})}))
    assert sampled.counts["distractors"] == 10
    assert build_retrieval_set(cfg).fingerprint() == rset.fingerprint() != sampled.fingerprint()
    with pytest.raises(DataError, match="no validation pairs"):
        build_retrieval_set(cfg.model_copy(update={"pairs": DataConfig(train_paths=[str(pairs)], validation_fraction=0.0)}))


def test_config_rules_name_the_field() -> None:
    from lmplatform.config.loader import ConfigError
    from lmplatform.objectives.run_config import load_run_config

    base = {"data": {"train_paths": ["x.jsonl"]}, "retrieval_validation": {}}
    with pytest.raises(ConfigError,
                       match="applies to objectives biencoder, biencoder_distill, cross_encoder, declutr, not 'mlm'"):
        load_run_config(None, base=base)
    with pytest.raises(ConfigError, match="retrieval_validation.pairs is required for declutr"):
        load_run_config(None, base=base | {"objective": {"name": "declutr"}})
    with pytest.raises(ConfigError, match="first_stage and .candidates apply to cross_encoder only"):
        load_run_config(None, base=base | {"objective": {"name": "biencoder"}, "retrieval_validation": {"candidates": 5}})
    cfg = load_run_config(None, base=base | {"objective": {"name": "biencoder"}})
    assert cfg.retrieval_validation.metric_names()[:3] == ("ir_recall_at_1", "ir_recall_at_10", "ir_recall_at_20")
    # workers validate the config again from its dump, with every field set
    assert type(cfg).model_validate(cfg.model_dump(mode="json")) == cfg


class TableEncoder:
    """An encoder with planted vectors: each text's row of `table`, normalised."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    def encode(self, texts, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        rows = np.array([self.table[t] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# Dense prefers the distractor "beta issue" for "alpha report"; only BM25 sees the shared word "alpha".
LEXICAL = {"alpha report": [1, 0], "alpha issue": [0.6, 0.8], "beta issue": [0.8, 0.6], "gamma note": [0, 1]}


def test_hybrid_validation_fuses_as_the_hybrid_retriever_does_and_reports_ir_hybrid_metrics() -> None:
    from lmplatform.retrieval.retrievers import DenseRetriever, HybridRetriever
    from lmplatform.retrieval.settings import FusionSettings

    pairs = [Pair("alpha report", "alpha issue")]
    fusion = FusionSettings(bm25_weight=0.7)
    cfg = CFG.model_copy(update={"hybrid": fusion})
    rset = retrieval_set_from_pairs(pairs, pairs, ["beta issue", "gamma note"], cfg)
    metrics = evaluate_model(TableEncoder(LEXICAL), rset, cfg)
    assert set(metrics) == set(cfg.per_query_metric_names())
    assert metrics["ir_mrr_at_3"].tolist() == [0.5] and metrics["ir_hybrid_mrr_at_3"].tolist() == [1.0]

    # The same pool, fused by HybridRetriever over the same texts: the same ranking and scores.
    encoder = TableEncoder(LEXICAL)
    vectors = encoder.encode([*rset.query_texts, *rset.candidate_texts])
    fused = hybrid_rankings(vectors[:1] @ vectors[1:].T, rset.bm25(), rset, cfg.depth(), fusion)
    hybrid = HybridRetriever(DenseRetriever(encoder), settings=fusion)
    hybrid.index([str(i) for i in range(len(rset.candidate_texts))], rset.candidate_texts)
    assert fused == [[int(d) for d, _ in row] for row in hybrid.search(rset.query_texts, cfg.depth())]


def test_choose_bm25_weight_picks_the_smallest_best_weight_on_the_set() -> None:
    pairs = [Pair("alpha report", "alpha issue")]
    rset = retrieval_set_from_pairs(pairs, pairs, ["beta issue"], CFG)
    # pool: alpha issue (dense 0, bm25 1 after min-max), beta issue (1, 0): the relevant report leads once
    # w > 1 - w, i.e. w > 0.5; at 0.5 it ties, and a tie counts against the query.
    choice = choose_bm25_weight(TableEncoder(LEXICAL), rset, CFG, metric="ir_mrr_at_3")
    assert choice.bm25_weight == 0.6 and choice.metric == "ir_mrr_at_3"
    assert [choice.per_weight[w]["ir_mrr_at_3"] for w in (0.0, 0.5, 0.6, 1.0)] == [0.5, 0.5, 1.0, 1.0]
    assert choice.per_weight[0.0]["ir_queries"] == 1
    with pytest.raises(ValueError, match="metric 'ir_mrr_at_10' is not scored"):
        choose_bm25_weight(TableEncoder(LEXICAL), rset, CFG)
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        choose_bm25_weight(TableEncoder(LEXICAL), rset, CFG, weights=[0.2, 1.2], metric="ir_mrr_at_3")


def test_hybrid_metrics_are_reported_to_tune_as_corpus_metrics_and_refused_for_a_cross_encoder() -> None:
    from lmplatform.config.loader import ConfigError
    from lmplatform.objectives.run_config import load_run_config, reported_metrics
    from lmplatform.tune.metrics import is_corpus_metric

    base = {"data": {"train_paths": ["x.jsonl"]}, "retrieval_validation": {"hybrid": {"bm25_weight": 0.2}}}
    cfg = load_run_config(None, base=base | {"objective": {"name": "biencoder"}})
    assert {"val_ir_hybrid_mrr_at_10", "val_ir_mrr_at_10", "val_ir_hybrid_map_at_100"} <= reported_metrics(cfg)
    assert is_corpus_metric("val_ir_hybrid_ndcg_at_10")
    with pytest.raises(ConfigError, match="retrieval_validation.hybrid fuses BM25 with a bi-encoder"):
        load_run_config(None, base=base | {"objective": {"name": "cross_encoder"}})
    with pytest.raises(ConfigError, match="retrieval_validation.hybrid.bm25_weight"):
        load_run_config(None, base={**base, "objective": {"name": "biencoder"},
                                    "retrieval_validation": {"hybrid": {"bm25_weight": 2}}})
