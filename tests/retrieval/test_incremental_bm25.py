"""IncrementalBM25 against bm25s: the same scores on the same texts, and after any additions and removals, the
scores bm25s gives when it indexes the documents held from scratch."""
from __future__ import annotations

import random

import numpy as np
import pytest

from lmplatform.retrieval import incremental_bm25
from lmplatform.retrieval.incremental_bm25 import IncrementalBM25
from lmplatform.retrieval.retrievers import BM25Retriever
from tests.conftest import TOKEN_WORDS

WORDS = [*TOKEN_WORDS, "the", "a", "of", "x"]  # stop words and a one-letter word, which the tokenizer drops
QUERIES = ["printer crash", "disk disk memory", "the of", "login timeout error user failed", "zebra unicorn", "vpn x"]


def _texts(rng: random.Random, n: int, start: int) -> dict[str, str]:
    return {f"d{start + i}": " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 18))) for i in range(n)}


def _scores_by_id(retriever: BM25Retriever, queries: list[str]) -> list[dict[str, float]]:
    rows = retriever.query_scores(queries)
    return [{doc_id: float(row[retriever.positions([doc_id])[0]]) for doc_id in retriever._positions} for row in rows]


def _assert_same_scores(live: IncrementalBM25, documents: dict[str, str]) -> None:
    scratch = BM25Retriever()
    scratch.index(list(documents), list(documents.values()))
    for got, want in zip(_scores_by_id(live, QUERIES), _scores_by_id(scratch, QUERIES)):
        assert set(got) == set(want) == set(documents)
        for doc_id, score in want.items():
            assert got[doc_id] == pytest.approx(score, rel=1e-5, abs=1e-6), doc_id


@pytest.mark.parametrize(("min_tail_postings", "share"), [(65_536, 1 / 16), (0, 0.0), (300, 1 / 16)],
                         ids=["all-in-tail", "fold-every-add", "mixed"])
def test_incremental_bm25_scores_as_bm25s_rebuilt_from_scratch_after_every_change(
    monkeypatch, request, min_tail_postings: int, share: float
) -> None:
    """Whether a change stays in the tail or folds the tail into the base, the scores are bm25s's from scratch."""
    monkeypatch.setattr(incremental_bm25, "MIN_TAIL_POSTINGS", min_tail_postings)
    monkeypatch.setattr(incremental_bm25, "TAIL_SHARE_OF_BASE", share)
    rng = random.Random(0)
    documents = _texts(rng, 200, 0)
    live = IncrementalBM25()
    live.index(list(documents), list(documents.values()))
    _assert_same_scores(live, documents)

    added = _texts(rng, 60, 200)
    live.add(list(added), list(added.values()))
    documents.update(added)
    _assert_same_scores(live, documents)
    gone = [f"d{i}" for i in range(0, 260, 4)]
    live.remove(gone + ["never-held"])
    for doc_id in gone:
        del documents[doc_id]
    replaced = {"d1": "printer printer crash", "d4": "vpn tunnel certificate expired"}  # d4 was removed: it comes back
    postings = live.postings
    live.add(list(replaced), list(replaced.values()))
    documents.update(replaced)
    if share == 0:  # the fold drops the removed documents' postings
        assert live.postings < postings
    assert live.folds == {"all-in-tail": 0, "fold-every-add": 3, "mixed": 2}[request.node.callspec.id]
    assert len(live) == len(documents) and "d4" in live and "d8" not in live
    _assert_same_scores(live, documents)
    assert live.search(["printer crash"], 1)[0][0][0] == "d1"
    assert all(doc not in set(gone) - {"d4"} for row in live.search(QUERIES, 50) for doc, _ in row)


def test_one_document_upserts_are_stacked_and_still_score_as_bm25s(monkeypatch) -> None:
    """A live index's upserts come one at a time: their row blocks are stacked, and removals still find each row."""
    monkeypatch.setattr(incremental_bm25, "MAX_ROW_BLOCKS", 3)
    rng = random.Random(5)
    documents = _texts(rng, 30, 0)
    live = IncrementalBM25()
    live.fold()  # nothing to fold yet
    live.index(list(documents), list(documents.values()))
    for doc_id, text in _texts(rng, 40, 30).items():
        live.add([doc_id], [text])
        documents[doc_id] = text
        assert len(live._row_blocks) <= 3
    gone = [f"d{i}" for i in range(1, 70, 3)]
    live.remove(gone)
    for doc_id in gone:
        del documents[doc_id]
    _assert_same_scores(live, documents)
    live.fold()
    _assert_same_scores(live, documents)


def test_incremental_bm25_refuses_what_bm25s_would() -> None:
    live = IncrementalBM25()
    with pytest.raises(ValueError, match="no documents"):
        live.query_scores(["x"])
    with pytest.raises(ValueError, match="not unique"):
        live.add(["a", "a"], ["x", "y"])
    live.add(["a"], ["printer"])
    live.remove(["a"])
    assert live.search(["printer"], 3) == [[]] and np.all(live.query_scores(["printer"])[0] == 0)


def test_a_long_query_scores_as_bm25s_counting_each_repeated_term() -> None:
    """A 100,000-character report repeats its terms thousands of times: each term is scored once, weighted by its
    count, with bm25s's scores."""
    rng = random.Random(3)
    documents = _texts(rng, 120, 0)
    live, scratch = IncrementalBM25(), BM25Retriever()
    live.index(list(documents), list(documents.values()))
    scratch.index(list(documents), list(documents.values()))
    long_query = " ".join(rng.choice(WORDS) for _ in range(20_000))[:100_000]
    (got,), (want,) = _scores_by_id(live, [long_query]), _scores_by_id(scratch, [long_query])
    assert len(long_query) == 100_000 and max(want.values()) > 0
    for doc_id, score in want.items():  # bm25s sums thousands of float32 terms: ~1e-5 of rounding, where ours sum float64
        assert got[doc_id] == pytest.approx(score, rel=1e-4, abs=1e-6), doc_id
