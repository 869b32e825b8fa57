"""BM25F and BM25F_ext: exact values on a hand-computed corpus, bigrams, parameters and the tuning search."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lmplatform.retrieval.bm25f import BM25FIndex, BM25FParams, ngrams, tokenize, tune_bm25f

FIELDS = ("title", "description")
DOCS = [
    {"title": "Crash, save!", "description": "crash file_file"},  # title 2 tokens, description 3
    {"title": "print", "description": "CRASH"},  # 1, 1
    {"title": "save dialog", "description": None},  # 2, 0
]
PARAMS = BM25FParams({"title": 2.0, "description": 1.0}, {"title": 0.5, "description": 1.0}, k1=1.0, k3=2.0)


def test_tokenize_and_ngrams() -> None:
    assert tokenize("Crash, save!  file_file Ünïcode42") == ["crash", "save", "file", "file", "ünïcode42"]
    assert tokenize(None) == [] and tokenize(3.5) == ["3", "5"]
    assert ngrams(["a", "b", "c"], 1) == ["a", "b", "c"]
    assert ngrams(["a", "b", "c"], 2) == ["a b", "b c"]
    assert ngrams(["a"], 2) == []
    with pytest.raises(ValueError):
        ngrams(["a"], 0)


def test_index_statistics() -> None:
    index = BM25FIndex(DOCS, FIELDS)
    assert index.lengths["title"].tolist() == [2, 1, 2] and index.lengths["description"].tolist() == [3, 1, 0]
    assert index.average_lengths == pytest.approx({"title": 5 / 3, "description": 4 / 3})
    df = {term: index.document_frequency[col] for term, col in index.vocabulary.items()}
    assert df == {"crash": 2, "save": 2, "file": 1, "print": 1, "dialog": 1}
    assert index.idf[index.vocabulary["crash"]] == pytest.approx(math.log(3 / 2))


def _by_hand(extended: bool) -> list[float]:
    # length normalisation 1 - b + b * length / average: title b=0.5 (average 5/3), description b=1 (average 4/3)
    title = [0.5 + 0.5 * 2 / (5 / 3), 0.5 + 0.5 * 1 / (5 / 3), 0.5 + 0.5 * 2 / (5 / 3)]  # 1.1, 0.8, 1.1
    desc = [3 / (4 / 3), 1 / (4 / 3)]  # 2.25, 0.75 (document 2 has no description terms)
    tf_d = [
        {"crash": 2 * 1 / title[0] + 1 * 1 / desc[0], "save": 2 * 1 / title[0], "file": 1 * 2 / desc[0]},
        {"crash": 1 * 1 / desc[1]},
        {"save": 2 * 1 / title[2]},
    ]
    idf = {"crash": math.log(3 / 2), "save": math.log(3 / 2), "file": math.log(3)}
    # the query: title "save crash", description "crash file unknownword"; TF_Q = Σ_f w_f · occurrences
    tf_q = {"save": 2.0, "crash": 2.0 + 1.0, "file": 1.0}
    k1, k3 = 1.0, 2.0
    scores = []
    for doc in tf_d:
        total = 0.0
        for term, tf in doc.items():
            query_side = (k3 + 1) * tf_q[term] / (k3 + tf_q[term]) if extended else 1.0
            total += idf[term] * tf / (k1 + tf) * query_side
        scores.append(total)
    return scores


@pytest.mark.parametrize("extended", [False, True])
def test_scores_by_hand(extended: bool) -> None:
    index = BM25FIndex(DOCS, FIELDS)
    query = {"title": "save crash", "description": "crash file unknownword", "product": "ignored"}
    got = index.scores(query, PARAMS, extended=extended)
    assert got.shape == (3,)
    np.testing.assert_allclose(got, _by_hand(extended), rtol=1e-9)
    # the plain variant counts a repeated query term once; the extended one saturates it
    repeated = {"title": "save save crash", "description": "crash file"}
    assert (index.scores(repeated, PARAMS) == index.scores({"title": "save crash", "description": "file"}, PARAMS)).all()
    assert index.scores(repeated, PARAMS, extended=True)[2] > index.scores(query, PARAMS, extended=True)[2]


def test_term_in_every_document_and_empty_query_score_zero() -> None:
    index = BM25FIndex([{"title": "a b"}, {"title": "a"}], ["title"])
    assert index.scores({"title": "a"}, BM25FParams()).tolist() == [0.0, 0.0]  # IDF log(2/2) = 0
    assert index.scores({"title": "zzz !!"}, BM25FParams()).tolist() == [0.0, 0.0]
    assert index.scores({"title": "b"}, BM25FParams())[0] > 0


def test_zero_weights_and_k_are_finite() -> None:
    index = BM25FIndex(DOCS, FIELDS)
    params = BM25FParams({"title": 0.0, "description": 1.0}, k1=0.0, k3=0.0)
    got = index.scores({"title": "save", "description": "file"}, params, extended=True)
    # save is only in titles (weight 0): nothing; file with k1 = 0 saturates to 1 and TF_Q (w=1) to 1: IDF alone
    np.testing.assert_allclose(got, [math.log(3), 0, 0], rtol=1e-9)


def test_bigrams() -> None:
    docs = [{"title": "crash on save", "description": "save on crash"}, {"title": "save crash", "description": ""}]
    index = BM25FIndex(docs, FIELDS, order=2)
    assert sorted(index.vocabulary) == ["crash on", "on crash", "on save", "save crash", "save on"]
    assert index.lengths["title"].tolist() == [2, 1] and index.lengths["description"].tolist() == [2, 0]
    params = BM25FParams(b={"title": 0.0, "description": 0.0}, k1=1.0)  # no length normalisation, unit weights
    # query bigrams: "crash on" (title; only document 0 has it), "save crash" (description; only document 1)
    got = index.scores({"title": "crash on", "description": "save crash"}, params, extended=True)
    # each: IDF log 2 · (1 / (1 + 1)) · ((k3 + 1) · 1 / (k3 + 1)) with k3 = 1
    np.testing.assert_allclose(got, [math.log(2) / 2, math.log(2) / 2], rtol=1e-9)


def test_params_validation_and_round_trip() -> None:
    with pytest.raises(ValueError, match="b\\[title\\]=1.5"):
        BM25FParams(b={"title": 1.5})
    with pytest.raises(ValueError, match="k1=-1"):
        BM25FParams(k1=-1)
    assert BM25FParams().weight_of("title") == 1.0 and BM25FParams().b_of("title") == 0.75
    assert BM25FParams.from_dict(PARAMS.to_dict()) == PARAMS and hash(BM25FParams.from_dict(PARAMS.to_dict())) == hash(PARAMS)
    assert PARAMS.with_value("b:title", 0.2).b["title"] == 0.2 and PARAMS.with_value("k3", 5).k3 == 5
    with pytest.raises(ValueError, match="unknown BM25F parameter"):
        PARAMS.with_value("bogus", 1)
    with pytest.raises(ValueError, match="lacks"):
        BM25FIndex(DOCS, FIELDS).scores({"title": "save"}, BM25FParams({"summary": 1.0}))


def test_tune_finds_the_best_on_a_grid() -> None:
    # a figure that peaks at k1 = 2, weight:title = 3 (separable): coordinate search finds it
    def figure(p: BM25FParams) -> float:
        return -((p.k1 - 2) ** 2) - (p.weight_of("title") - 3) ** 2

    best, value = tune_bm25f(figure, BM25FParams(), {"k1": [0.5, 1.2, 2.0], "weight:title": [1.0, 3.0, 5.0]})
    assert (best.k1, best.weight_of("title"), value) == (2.0, 3.0, 0.0)
