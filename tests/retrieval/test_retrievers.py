from pathlib import Path

import numpy as np
import pytest

from lmplatform.metrics.retrieval import rank_by_score
from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.models.encoder import Encoder
from lmplatform.retrieval.fusion import convex_scores, reciprocal_rank_fusion
from lmplatform.retrieval.retrievers import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    TwoStageRetriever,
    admitted_hits,
    hybrid_search,
    rerank,
)
from lmplatform.retrieval.settings import FusionSettings

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

    def score(self, queries, documents, batch_size=32):
        return np.array([sum(w in d for w in q.split()) for q, d in zip(queries, documents)], dtype=np.float32)

    def rerank(self, query, candidates, batch_size=32):
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
    expected = cross.score([query] * 5, [CORPUS[d] for d, _ in first_hits])
    assert [d for d, _ in out] == [d for d, _ in rank_by_score(zip([d for d, _ in first_hits], expected.tolist()))]
    assert out[0][1] == pytest.approx(1.0) and out[-1][1] == pytest.approx(0.0)  # min-max of the cross-encoder's scores
    assert all(a[1] >= b[1] for a, b in zip(out, out[1:]))
    # rerank_weight 0: the first stage's order
    two.rerank_weight = 0.0
    assert [d for d, _ in two.search([query], k=5)[0]] == [d for d, _ in first_hits]


def test_hybrid_at_weight_0_and_1_ranks_as_dense_and_as_bm25(tiny_bert: Path) -> None:
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=32)
    dense, bm25 = DenseRetriever(encoder), BM25Retriever()
    dense.index(list(CORPUS), list(CORPUS.values()))
    bm25.index(list(CORPUS), list(CORPUS.values()))
    hybrid = HybridRetriever(DenseRetriever(encoder), settings=FusionSettings(hybrid_candidates=3))
    hybrid.index(list(CORPUS), list(CORPUS.values()))
    queries = ["printer on the second floor", "the vpn certificate expired overnight"]
    hybrid.settings = FusionSettings(bm25_weight=0.0, hybrid_candidates=3)
    assert ([[d for d, _ in row] for row in hybrid.search(queries, k=3)]
            == [[d for d, _ in row] for row in dense.search(queries, k=3)])
    hybrid.settings = FusionSettings(bm25_weight=1.0, hybrid_candidates=3)
    by_bm25 = bm25.search(queries, k=3)
    assert ([[d for d, _ in row][: len(b)] for row, b in zip(hybrid.search(queries, k=3), by_bm25)]
            == [[d for d, _ in b] for b in by_bm25])

    # An excluded document takes no place in the pool nor in its normalisation (r1 is both lists' best for
    # query 0); with k=4 above hybrid_candidates, each list gives its top 4.
    hybrid.settings = FusionSettings(bm25_weight=0.4, hybrid_candidates=3)
    excluded = hybrid.search(queries[:1], k=4, exclude=[{"r1"}])[0]
    dense_all, bm25_all = dense.search(queries[:1], k=6)[0], dict(bm25.search(queries[:1], k=6)[0])
    assert dense_all[0][0] == "r1" == bm25.search(queries[:1], k=1)[0][0][0]
    pool = [d for d, _ in dense_all[1:5]] + [d for d, _ in bm25.search(queries[:1], k=4, exclude=[{"r1"}])[0]]
    pool = list(dict.fromkeys(pool))
    expected = convex_scores([dict(dense_all)[d] for d in pool], [bm25_all.get(d, 0.0) for d in pool], 0.4)
    by_hand = rank_by_score(zip(pool, expected.tolist()))[:4]
    assert [d for d, _ in excluded] == [d for d, _ in by_hand] and max(expected) == pytest.approx(0.6)
    # The hybrid's cosines are numpy's float32 product of reconstructed vectors, the hand's are FAISS's: summed in
    # another order, which differs with the host's SIMD width (1.5e-6 apart after min-max on an AVX2 host).
    assert [s for _, s in excluded] == pytest.approx([s for _, s in by_hand], abs=1e-5)
    hybrid.settings = FusionSettings(fusion="rrf", hybrid_candidates=3)
    assert hybrid.search(queries, k=3) == [reciprocal_rank_fusion([[d for d, _ in dense_hits], [d for d, _ in bm25_hits]])[:3]
                                           for dense_hits, bm25_hits in zip(dense.search(queries, k=3), by_bm25)]


def test_bm25_saves_and_loads_with_its_ids(tmp_path: Path) -> None:
    bm25 = BM25Retriever(k1=1.2, b=0.5)
    bm25.index(list(CORPUS), list(CORPUS.values()))
    loaded = BM25Retriever.load(bm25.save(tmp_path / "bm25"))
    assert (loaded.k1, loaded.b, loaded.ids) == (1.2, 0.5, list(CORPUS))
    queries = ["invoice timeout", "printer jams", "zebra"]
    assert loaded.search(queries, k=3) == bm25.search(queries, k=3)
    assert np.array_equal(loaded.query_scores(["printer"])[0], bm25.query_scores(["printer"])[0])
    with pytest.raises(FileNotFoundError, match="bm25_meta.json is missing"):
        BM25Retriever.load(tmp_path)


def test_admitted_hits_search_deeper_until_the_filter_keeps_enough() -> None:
    ranked = [(f"d{i}", 1.0 - i / 100) for i in range(50)]
    widths: list[int] = []

    def search(width: int) -> list[tuple[str, float]]:
        widths.append(width)
        return ranked[:width]

    every_tenth = {f"d{i}" for i in range(0, 50, 10)}
    assert admitted_hits(search, 3, every_tenth.__contains__, 50) == [("d0", 1.0), ("d10", 0.9), ("d20", 0.8)]
    assert widths == [3, 12, 48]  # 4× deeper each time, until three of them are kept
    widths.clear()
    assert admitted_hits(search, 9, every_tenth.__contains__, 50) == [h for h in ranked if h[0] in every_tenth]
    assert widths[-1] == 50  # the whole index searched, and fewer than asked returned
    widths.clear()
    assert admitted_hits(lambda width: ranked[:7][:width], 5, lambda d: d != "d0", 50) == ranked[1:6]
    assert admitted_hits(lambda width: ranked[:4][:width], 5, lambda d: d != "d0", 50) == ranked[1:4]  # it ran out


def test_a_filtered_hybrid_search_fills_its_pool_from_the_documents_it_keeps(tiny_bert: Path) -> None:
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=32)
    hybrid = HybridRetriever(DenseRetriever(encoder), settings=FusionSettings(bm25_weight=0.4, hybrid_candidates=2))
    hybrid.index(list(CORPUS), list(CORPUS.values()))
    query = ["printer on the second floor"]
    vectors = encoder.encode(query)
    kept = set(list(CORPUS)[1::2])
    index, bm25 = hybrid.dense.vector_index, hybrid.bm25
    everything = hybrid_search(index, bm25, vectors, query, 6, hybrid.settings)[0]
    filtered = hybrid_search(index, bm25, vectors, query, 6, hybrid.settings, admit=kept.__contains__)[0]
    assert {d for d, _ in filtered} == kept and len(everything) == len(CORPUS)
    # a filter is an exclusion of everything it does not keep
    left_out = [set(CORPUS) - kept]
    assert filtered == hybrid_search(index, bm25, vectors, query, 6, hybrid.settings, left_out)[0]
