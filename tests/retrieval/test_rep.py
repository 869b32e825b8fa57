"""REP: its categorical features by hand, its value parsers, the training triples, a RankNet fit that learns a
planted signal (and keeps its constraints), the torch training loss against the numpy scoring, and its saved form."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lmplatform.retrieval.bm25f import BM25FParams
from lmplatform.retrieval.rep import (
    FEATURES,
    RepFields,
    RepIndex,
    RepModel,
    metadata_features,
    priority_rank,
    rank_net_loss,
    rep_features,
    training_triples,
    version_key,
)

REPORTS = [
    {"id": "0", "title": "crash on save", "description": "writer crashes when saving", "product": "Writer",
     "component": "ui", "type": "defect", "priority": "P1", "version": "3.2.1"},
    {"id": "1", "title": "print dialog", "description": "crash", "product": "Calc", "component": "ui", "type": "",
     "priority": "Critical", "version": "OOo 2.0"},
    {"id": "2", "title": "save dialog", "description": "", "product": "", "component": None, "type": "defect",
     "priority": "--", "version": "unspecified"},
]


def test_priority_and_version_values() -> None:
    assert [priority_rank(v) for v in ("P1", " p5 ", "Blocker", "trivial", "Medium", "Normal")] == [1, 5, 1, 5, 3, 3]
    assert [priority_rank(v) for v in ("", None, "--", "enhancement", "P6")] == [None] * 5
    assert version_key("3.2.1") == pytest.approx(3.002001) and version_key("OOo 2.0") == 2.0
    assert version_key("7") == 7.0 and version_key("1.2.3.4") == pytest.approx(1.002003)
    assert version_key("3.10") > version_key("3.9") > version_key("3.2.1")
    assert version_key("1.2000") == pytest.approx(1.999)  # a part beyond 999 is clipped, never the next major
    assert [version_key(v) for v in ("", None, "unspecified", "trunk")] == [None] * 4


def test_metadata_features_by_hand() -> None:
    index = RepIndex(REPORTS)
    query = {"product": "Writer", "component": "ui", "type": "defect", "priority": "P3", "version": "3.2"}
    expected = [
        [1, 1, 1, 1 / (1 + 2), 1 / (1 + 1e-6)],  # P1 vs P3; 3.002001 vs 3.002
        [0, 1, 0, 1 / (1 + 1), 1 / (1 + 1.002)],  # Critical = 2; 2.0 vs 3.002; blank type never matches
        [0, 0, 1, 0, 0],  # blank product and component, "--" and "unspecified" unknown
    ]
    np.testing.assert_allclose(metadata_features(query, index), expected, rtol=1e-12)
    np.testing.assert_allclose(metadata_features(query, index, np.array([2, 0])), [expected[2], expected[0]])


def test_blank_and_unknown_query_values_give_zero() -> None:
    index = RepIndex(REPORTS)
    blank = {"product": "", "component": None, "type": "  ", "priority": "", "version": ""}
    assert not metadata_features(blank, index).any()  # report 2 is blank too: blank never matches blank
    assert not metadata_features({"product": "Impress", "priority": "urgent!", "version": "n/a"}, index).any()
    assert not metadata_features({}, index).any()


def test_field_names_are_parameters() -> None:
    renamed = [{"key": r["id"], "summary": r["title"], "body": r["description"], "prod": r["product"],
                "sev": r["priority"]} for r in REPORTS]
    fields = RepFields(id="key", text=("summary", "body"), product="prod", priority="sev")
    index = RepIndex(renamed, fields)
    got = metadata_features({"prod": "Calc", "sev": "P2"}, index)
    np.testing.assert_allclose(got[:, 0], [0, 1, 0])
    np.testing.assert_allclose(got[:, 3], [1 / 2, 1, 0])
    assert index.ids == ["0", "1", "2"] and index.unigrams.fields == ("summary", "body")


def test_rep_features_and_score() -> None:
    index = RepIndex(REPORTS)
    model = RepModel((1.0, 2.0, 3.0, 0.5, 0.0, 1.0, 4.0), BM25FParams({"title": 2.0}, k1=0.8),
                     BM25FParams(b={"description": 0.3}, k3=3.0))
    query = {"title": "crash on save dialog", "description": "writer crashes", "product": "Writer", "priority": "P2"}
    features = rep_features(query, index, model.unigram, model.bigram)
    assert features.shape == (3, len(FEATURES))
    text = {"title": query["title"], "description": query["description"]}
    np.testing.assert_allclose(features[:, 0], index.unigrams.scores(text, model.unigram, extended=True))
    np.testing.assert_allclose(features[:, 1], index.bigrams.scores(text, model.bigram, extended=True))
    assert features[0, 1] > 0 and features[1, 1] == 0  # "crash on", "on save", "writer crashes" are report 0's
    np.testing.assert_allclose(features[:, 2:], metadata_features(query, index))
    np.testing.assert_allclose(model.score(query, index), features @ np.array(model.weights))


def test_training_triples() -> None:
    ids = [str(i) for i in range(50)]
    pairs = [("1", "0"), ("2", "0"), ("3", "2"), ("5", "4")]  # groups {0, 1, 2, 3} and {4, 5}
    triples = training_triples(pairs, ids, negatives=10, seed=3)
    assert triples == training_triples(pairs, ids, negatives=10, seed=3)
    assert triples != training_triples(pairs, ids, negatives=10, seed=4)
    assert len(triples) == 40
    for duplicate, master in pairs:
        rows = [t for t in triples if t[:2] == (duplicate, master)]
        irrelevant = [t[2] for t in rows]
        assert len(rows) == 10 and len(set(irrelevant)) == 10
        group = {"0", "1", "2", "3"} if master in {"0", "2"} else {"4", "5"}
        assert not group & set(irrelevant)
    # fewer reports outside the group than asked: all of them
    small = training_triples([("1", "0")], ["0", "1", "2", "3"], negatives=10)
    assert sorted(t[2] for t in small) == ["2", "3"]
    # given groups that leave the pair out: its master is still never irrelevant
    assert {t[2] for t in training_triples([("1", "0")], ["0", "1", "2"], negatives=5, groups={"2": "x"})} == {"2"}
    with pytest.raises(ValueError, match="'9' is not among the ids"):
        training_triples([("9", "0")], ["0"])


def synthetic(seed: int = 0, groups: int = 30, size: int = 3) -> tuple[list[dict], list[tuple[str, str]]]:
    """Groups identified by (product, component) only; the text is noise over 15 common words, of varied lengths
    (some descriptions empty), so untuned BM25F with unit weights misleads and a fit must learn to trust the
    categorical features."""
    rng = np.random.default_rng(seed)
    common = [f"w{i}" for i in range(15)]
    reports, pairs = [], []
    for g in range(groups):
        for m in range(size):
            description = " ".join(rng.choice(common, rng.integers(5, 30)))
            reports.append({"id": f"g{g}m{m}", "title": " ".join(rng.choice(common, rng.integers(2, 8))),
                            "description": "" if (g, m) in ((3, 1), (10, 0), (17, 2)) else description,
                            "product": f"p{g % 10}", "component": f"c{g // 10}"})
        pairs += [(f"g{g}m{m}", f"g{g}m0") for m in range(1, size)]
    return reports, pairs


def _ordered(model: RepModel, index: RepIndex, triples: list[tuple[str, str, str]]) -> float:
    """The share of triples whose relevant report outscores the irrelevant one."""
    scores = {q: model.score(index.reports[index.positions[q]], index) for q in {t[0] for t in triples}}
    return float(np.mean([scores[q][index.positions[r]] > scores[q][index.positions[i]] for q, r, i in triples]))


def test_training_loss_matches_the_numpy_scores() -> None:
    reports, pairs = synthetic(groups=10)
    index = RepIndex(reports)
    triples = training_triples(pairs, index.ids, negatives=3, seed=0)
    model = RepModel((0.7, 1.3, 2.0, 0.5, 1.0, 0.2, 0.0),
                     BM25FParams({"title": 2.5, "description": 0.5}, {"title": 0.3, "description": 1.0}, k1=1.7, k3=0.4),
                     BM25FParams({"title": 1.0, "description": 0.2}, {"title": 1.0, "description": 0.0}, k1=0.6, k3=2.0))
    by_numpy = []
    for q, r, i in triples:
        scores = model.score(index.reports[index.positions[q]], index)
        by_numpy.append(math.log1p(math.exp(scores[index.positions[i]] - scores[index.positions[r]])))
    assert rank_net_loss(model, index, triples) == pytest.approx(np.mean(by_numpy), rel=1e-9)
    with pytest.raises(ValueError, match="'nope'"):
        rank_net_loss(model, index, [("nope", "g0m0", "g1m0")])


def test_fit_learns_to_rank_held_out_duplicates() -> None:
    reports, pairs = synthetic()
    index = RepIndex(reports)
    train = training_triples(pairs[::2], index.ids, negatives=5, seed=0)
    held_out = training_triples(pairs[1::2], index.ids, negatives=20, seed=1)  # other duplicates of the groups
    start = RepModel()
    fitted = start.fit(index, train)
    assert _ordered(start, index, held_out) < 0.85
    assert _ordered(fitted, index, held_out) > 0.97
    assert rank_net_loss(fitted, index, held_out) < rank_net_loss(start, index, held_out) / 5
    # the planted signal is what it learned; every value stays in its range
    assert min(fitted.weights[2], fitted.weights[3]) > max(fitted.weights[0], fitted.weights[1])
    assert min(fitted.weights) >= 0
    for params in (fitted.unigram, fitted.bigram):
        assert set(params.weights) == set(params.b) == {"title", "description"}
        assert all(0 <= b <= 1 for b in params.b.values()) and params.k1 >= 0 and params.k3 >= 0
    assert fitted.fit(index, train, steps=0) == fitted  # no step: the model it started from


def test_save_and_load() -> None:
    reports, pairs = synthetic(groups=6)
    index = RepIndex(reports)
    fitted = RepModel().fit(index, training_triples(pairs, index.ids, negatives=3), steps=20)
    loaded = RepModel.from_dict(json.loads(json.dumps(fitted.to_dict())))
    assert loaded == fitted
    for report in reports[:5]:
        assert (loaded.score(report, index) == fitted.score(report, index)).all()
    with pytest.raises(ValueError, match="7 feature weights"):
        RepModel((1.0, 2.0))
    with pytest.raises(ValueError, match="features"):
        RepModel.from_dict({**fitted.to_dict(), "features": ["a"]})
