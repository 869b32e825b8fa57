"""A retrieval system scored as served: planted vectors and planted re-ranker scores give rankings checked by hand,
settings are chosen on the set, each (query, document) pair is re-scored once, and a re-ranker dev gives no weight
is dropped."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import pytest

from lmplatform.data.pairs import Pair
from lmplatform.evaluation.retrieval_validation import evaluate_model, retrieval_set_from_pairs
from lmplatform.evaluation.system import SystemScorer
from lmplatform.retrieval.settings import SearchSettings
from tests.evaluation.test_retrieval_validation import CFG, LEXICAL, TableEncoder


class TableReranker:
    """A re-ranker with planted scores per (query, document), counting what it was asked to score."""

    def __init__(self, scores: dict[tuple[str, str], float]):
        self.scores, self.asked = scores, Counter()

    def score(self, queries: Sequence[str], documents: Sequence[str], batch_size: int = 32) -> np.ndarray:
        self.asked.update(zip(queries, documents))
        return np.array([self.scores[(q, d)] for q, d in zip(queries, documents)])


# "alpha report" -> "alpha issue": dense ranks beta issue, gamma note, then alpha issue; BM25 sees the shared word.
PAIRS = [Pair("alpha report", "alpha issue")]
RERANKED = {("alpha report", "beta issue"): 0.1, ("alpha report", "gamma note"): 0.0, ("alpha report", "alpha issue"): 0.9}


def _scorer(reranker: TableReranker | None = None) -> SystemScorer:
    rset = retrieval_set_from_pairs(PAIRS, PAIRS, ["beta issue", "gamma note"], CFG)
    return SystemScorer(TableEncoder(LEXICAL), rset, CFG, reranker)


def test_dense_hybrid_and_reranked_rankings_by_hand() -> None:
    scorer = _scorer(TableReranker(RERANKED))
    names = lambda hits: [scorer.rset.candidate_texts[i] for i, _ in hits[0]]
    assert names(scorer.hits(SearchSettings(mode="dense"))) == ["beta issue", "alpha issue", "gamma note"]
    dense = scorer.per_query(SearchSettings(mode="dense"))
    assert dense["ir_mrr_at_3"].tolist() == evaluate_model(TableEncoder(LEXICAL), scorer.rset, CFG)["ir_mrr_at_3"].tolist()
    # BM25 alone: only "alpha issue" shares a word with the query
    assert names(scorer.hits(SearchSettings(mode="hybrid", bm25_weight=1.0)))[0] == "alpha issue"
    assert names(scorer.hits(SearchSettings(mode="hybrid", bm25_weight=0.0))) == ["beta issue", "alpha issue", "gamma note"]
    # the re-ranker over the dense top 2 alone (weight 1): alpha issue (0.9) over beta issue (0.1); gamma note stays below
    reranked = SearchSettings(mode="dense", reranker="planted", rerank_depth=2, rerank_weight=1.0)
    assert names(scorer.hits(reranked)) == ["alpha issue", "beta issue", "gamma note"]
    assert scorer.per_query(reranked)["ir_mrr_at_3"].tolist() == [1.0]


def test_settings_are_chosen_on_the_set_and_each_pair_is_rescored_once() -> None:
    reranker = TableReranker(RERANKED)
    scorer = _scorer(reranker)
    base = SearchSettings(mode="hybrid", reranker="planted")
    choice = scorer.choose(base, bm25_weights=[0.0, 0.6, 1.0], rerank_depths=[1, 2], rerank_weights=[0.0, 1.0],
                           metric="ir_mrr_at_3")
    # 0.6 is the smallest weight that puts alpha issue first (as choose_bm25_weight finds); the re-ranker then adds
    # nothing over it, so the first setting of the grid that keeps MRR at 1 wins: depth 1 with weight 0, and a
    # re-ranker with no weight is dropped from what would be served
    assert choice.settings.bm25_weight == 0.6 and choice.settings.reranker is None
    assert {tuple(sorted(t)) for t in choice.tried} >= {("bm25_weight", "metrics"), ("metrics", "rerank_depth", "rerank_weight")}
    assert max(reranker.asked.values()) == 1  # every pair scored once, however many settings were tried
    with pytest.raises(ValueError, match="metric 'ir_mrr_at_10' is not scored"):
        scorer.choose(base, bm25_weights=[0.1])


def test_a_reranker_that_helps_is_kept_with_its_depth_and_weight() -> None:
    scorer = _scorer(TableReranker(RERANKED))
    choice = scorer.choose(SearchSettings(mode="dense", reranker="planted"), rerank_depths=[1, 2],
                           rerank_weights=[0.0, 0.5, 1.0], metric="ir_mrr_at_3")
    assert (choice.settings.reranker, choice.settings.rerank_depth) == ("planted", 2)
    assert choice.settings.rerank_weight in (0.5, 1.0)
    with pytest.raises(ValueError, match="given no re-ranker"):
        _scorer().hits(SearchSettings(reranker="planted"))


def test_metadata_fusion_ranks_the_pool_by_hand() -> None:
    """Only the component decides: the relevant report shares the query's, the distractors do not."""
    from lmplatform.evaluation.system import SetMetadata
    from lmplatform.retrieval.metadata_fusion import MetadataFusion
    from lmplatform.retrieval.settings import MetadataFusionConfig

    cfg = MetadataFusionConfig(match_fields=["component"], time_field=None)
    fusion = MetadataFusion(cfg, np.array([0.0, 0.0, 0.0, 1.0]), 0.0).to_dict()
    scorer = _scorer()
    by_text = {"alpha report": {"component": "ui"}, "alpha issue": {"component": "ui"}, "beta issue": {"component": "db"}}
    scorer.metadata = SetMetadata.of(scorer.rset, by_text)
    settings = SearchSettings(mode="metadata", metadata_fusion=fusion)
    hits = scorer.hits(settings)[0]
    # alpha issue first (score 1); the two at 0 tie, in pool order
    assert [(scorer.rset.candidate_texts[i], s) for i, s in hits] == [("alpha issue", 1.0), ("beta issue", 0.0),
                                                                       ("gamma note", 0.0)]
    assert scorer.per_query(settings)["ir_mrr_at_3"].tolist() == [1.0]  # dense alone: 0.5
    with pytest.raises(ValueError, match="needs the set's metadata"):
        _scorer().hits(settings)


def _metadata_set(seed: int, dense_finds_it: bool):
    """Queries q<i> with their report d<i> among 20 distractors; relevant reports share the query's component and
    were filed a day before it, distractors are random. Dense is noise unless `dense_finds_it`."""
    from lmplatform.evaluation.system import SetMetadata, SystemScorer

    rng = np.random.default_rng(seed)
    pairs = [Pair(f"q{seed}-{i}", f"d{seed}-{i}") for i in range(12)]
    distractors = [f"x{seed}-{j}" for j in range(20)]
    table, by_text = {}, {}
    for i, pair in enumerate(pairs):
        table[pair.query] = rng.normal(size=8).tolist()
        table[pair.document] = table[pair.query] if dense_finds_it else rng.normal(size=8).tolist()
        by_text[pair.query] = {"component": f"c{i % 4}", "created": 100 * 86_400 + i * 86_400}
        by_text[pair.document] = {"component": f"c{i % 4}", "created": 99 * 86_400 + i * 86_400}
    for text in distractors:
        table[text] = rng.normal(size=8).tolist()
        by_text[text] = {"component": f"c{rng.integers(8)}", "created": float(rng.uniform(0, 900)) * 86_400}
    rset = retrieval_set_from_pairs(pairs, pairs, distractors, CFG)
    return SystemScorer(TableEncoder(table), rset, CFG, metadata=SetMetadata.of(rset, by_text))


def test_a_fusion_fitted_on_training_queries_becomes_the_mode_only_when_it_beats_the_first_stage() -> None:
    from lmplatform.retrieval.settings import MetadataFusionConfig, MetadataFusionWeights

    cfg = MetadataFusionConfig(match_fields=["component"])
    fusions = [MetadataFusionWeights.model_validate(_metadata_set(1, False).fit_metadata_fusion(
        cfg.model_copy(update={"regularization": c})).to_dict()) for c in (0.1, 10.0)]
    select = _metadata_set(2, False)
    choice = select.choose(SearchSettings(mode="dense"), metric="ir_mrr_at_3", metadata_fusions=fusions)
    assert choice.settings.mode == "metadata" and choice.settings.metadata_fusion in fusions
    assert select.means(choice.settings)["ir_mrr_at_3"] > select.means(SearchSettings())["ir_mrr_at_3"] + 0.3
    assert [t["metadata_regularization"] for t in choice.tried] == [0.1, 10.0]
    # where dense already ranks every relevant report first, the fusion is kept for requests but is not the mode
    perfect = _metadata_set(3, True).choose(SearchSettings(mode="dense"), metric="ir_mrr_at_3", metadata_fusions=fusions)
    assert perfect.settings.mode == "dense" and perfect.settings.metadata_fusion is not None


def test_two_sets_over_one_corpus_encode_its_texts_once() -> None:
    from lmplatform.evaluation.system import EncodedOnce, SystemScorer

    class Counting(TableEncoder):
        def __init__(self, table: dict[str, list[float]]):
            super().__init__(table)
            self.encoded: Counter = Counter()

        def encode(self, texts, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
            self.encoded.update(texts)
            return super().encode(texts, batch_size, show_progress)

    counting = Counting(LEXICAL)
    encoder = EncodedOnce(counting)
    first = SystemScorer(encoder, retrieval_set_from_pairs(PAIRS, PAIRS, ["beta issue", "gamma note"], CFG), CFG)
    second = SystemScorer(encoder, retrieval_set_from_pairs(PAIRS, PAIRS, ["gamma note", "beta issue"], CFG), CFG)
    assert set(counting.encoded.values()) == {1} and len(counting.encoded) == 4
    np.testing.assert_array_equal(first.dense, second.dense[:, [0, 2, 1]])  # the same vectors, in each set's order
