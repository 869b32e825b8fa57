from pathlib import Path

import numpy as np
import pytest

from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.models.encoder import Encoder
from lmplatform.retrieval.retrievers import BM25Retriever, DenseRetriever, TwoStageRetriever, rerank

CORPUS = {
    "r1": "printer jams on the second floor every morning",
    "r2": "vpn tunnel drops when the certificate expired",
    "r3": "payment gateway rejects invoice with timeout",
    "r4": "mobile app login screen freezes after update",
    "r5": "database backup queue is stuck overnight",
    "r6": "disk full on the mail server causes bounce",
}


def test_bm25_finds_exact_term_matches_and_excludes() -> None:
    bm25 = BM25Retriever()
    bm25.index(list(CORPUS), list(CORPUS.values()))
    hits = bm25.search(["invoice timeout", "certificate vpn", "zebra unicorn"], k=3)
    assert hits[0][0][0] == "r3" and hits[1][0][0] == "r2"
    assert hits[2] == []  # no word in the corpus: nothing matches
    assert all(score > 0 for row in hits for _, score in row)
    excluded = bm25.search(["invoice timeout"], k=3, exclude=[{"r3"}])
    assert "r3" not in [d for d, _ in excluded[0]]
    with pytest.raises(ValueError, match="positive"):
        bm25.search(["x"], k=0)


def test_dense_retriever_finds_a_copied_text(tiny_bert: Path) -> None:
    dense = DenseRetriever(Encoder.from_pretrained(tiny_bert, max_seq_length=32), batch_size=4)
    dense.index(list(CORPUS), list(CORPUS.values()))
    hits = dense.search([CORPUS["r4"], CORPUS["r1"]], k=2)
    assert [row[0][0] for row in hits] == ["r4", "r1"]
    assert hits[0][0][1] == pytest.approx(1.0, abs=1e-4)
    assert dense.search([CORPUS["r4"]], k=6, exclude=[{"r4"}])[0][0][0] != "r4"


class KeywordScorer:
    """A stand-in re-ranker with known scores: counts the query's words in the document."""

    def score(self, queries, documents, batch_size=32):  # noqa: ANN001, ANN201
        return np.array([sum(w in d for w in q.split()) for q, d in zip(queries, documents)], dtype=np.float32)

    def rerank(self, query, candidates, batch_size=32):  # noqa: ANN001, ANN201
        return self.score([query] * len(candidates), candidates)


def test_rerank_keeps_candidates_and_orders_by_score() -> None:
    candidates = [("a", "nothing here"), ("b", "printer jam"), ("c", "printer")]
    out = rerank(KeywordScorer(), "printer jam", candidates)
    assert [d for d, _ in out] == ["b", "c", "a"]
    assert sorted(d for d, _ in out) == ["a", "b", "c"]


def test_two_stage_reranks_top_n_and_keeps_the_rest(tiny_bert: Path) -> None:
    first = BM25Retriever()
    two = TwoStageRetriever(first, KeywordScorer(), candidates=2)
    two.index(list(CORPUS), list(CORPUS.values()))
    base = first.search(["the printer on the second floor jams"], k=4)[0]
    out = two.search(["the printer on the second floor jams"], k=4)[0]
    assert {d for d, _ in out[:2]} == {d for d, _ in base[:2]}
    assert out[2:] == base[2:]

    # a real (random tiny) cross-encoder: same candidate set, ordered by its scores
    cross = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=64)
    dense_first = DenseRetriever(Encoder.from_pretrained(tiny_bert, max_seq_length=32))
    two = TwoStageRetriever(dense_first, cross, candidates=5)
    two.index(list(CORPUS), list(CORPUS.values()))
    query = "printer jams every morning"
    first_hits = dense_first.search([query], k=5)[0]
    out = two.search([query], k=5, exclude=[set()])[0]
    assert {d for d, _ in out} == {d for d, _ in first_hits}
    expected = cross.score([query] * 5, [CORPUS[d] for d, _ in out])
    assert np.allclose([s for _, s in out], expected, atol=1e-5)
    assert all(a[1] >= b[1] for a, b in zip(out, out[1:]))
