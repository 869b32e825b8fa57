"""The metadata fusion: its features by hand, a fit that finds a planted signal, and its saved form."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lmplatform.data.fields import parse_time
from lmplatform.data.readers import DataError
from lmplatform.retrieval.metadata_fusion import MetadataFusion, candidate_pool, fusion_features
from lmplatform.retrieval.settings import MetadataFusionConfig, MetadataFusionWeights, feature_names

CFG = MetadataFusionConfig()


def test_features_by_hand() -> None:
    query = {"product": "Writer", "component": "ui", "created": "2001-01-10 00:00:00 +0000"}
    candidates = [
        {"product": "Writer", "component": "x", "created": "2001-01-09T00:00:00+00:00"},  # a day earlier
        {"product": "Calc", "created": ""},  # time unknown
        {"product": "", "component": "ui", "created": 979_084_800 + 9 * 86_400},  # epoch seconds, 9 days later
    ]
    x = fusion_features(np.array([0.9, 0.5, 0.1]), np.array([3.0, 0.0, 1.0]), query, candidates, CFG)
    assert feature_names(CFG) == ["dense_norm", "bm25_norm", "dense", "same_product", "same_component", "log_days",
                                  "earlier", "time_unknown"]
    expected = [[1.0, 1.0, 0.9, 1, 0, math.log(2), 1, 0],
                [0.5, 0.0, 0.5, 0, 0, 0.0, 0, 1],
                [0.0, 1 / 3, 0.1, 0, 1, math.log(10), 0, 0]]
    np.testing.assert_allclose(x, expected, atol=1e-9)
    # an empty value never matches, even an empty one in the query
    x = fusion_features(np.ones(1), np.zeros(1), {"product": ""}, [{"product": ""}], MetadataFusionConfig(time_field=None))
    assert x.tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0]]
    assert fusion_features(np.zeros(0), np.zeros(0), query, [], CFG).shape == (0, len(feature_names(CFG)))  # no pool


def test_a_report_under_several_components_matches_one_under_any_of_them() -> None:
    """The importer joins a list value with ", " (Jira's components, versions): its items match one by one."""
    cfg = MetadataFusionConfig(match_fields=["component"], time_field=None)
    candidates = [{"component": "fs"}, {"component": "test, ui"}, {"component": "ui"}, {"component": "fs, test"},
                  {"component": ""}, {"component": "fsck"}]
    x = fusion_features(np.ones(6), np.zeros(6), {"component": "fs, test"}, candidates, cfg)
    assert x[:, -1].tolist() == [1, 1, 0, 1, 0, 0]
    x = fusion_features(np.ones(6), np.zeros(6), {"component": "ui"}, candidates, cfg)
    assert x[:, -1].tolist() == [0, 1, 1, 0, 0, 0]


def test_a_bad_time_names_its_field() -> None:
    with pytest.raises(DataError, match="created: 'last tuesday' is not a time"):
        fusion_features(np.ones(1), np.ones(1), {"created": "last tuesday"}, [{"created": 0}], CFG)
    for bad in (10**400, float("nan"), True, "10000-01-01", [2001]):  # beyond a float, or not a time
        with pytest.raises(DataError, match="is not a time"):
            parse_time(bad, "created")


def test_the_pool_is_both_stages_best_less_the_query_and_bm25_non_matches() -> None:
    dense = np.array([0.1, 0.9, 0.5, 0.3, 0.2])
    bm25 = np.array([0.0, 2.0, 0.0, 1.0, 0.0])
    assert candidate_pool(dense, bm25, 1, excluded=[1]).tolist() == [2, 3]
    assert candidate_pool(dense, bm25, 3, excluded=[1]).tolist() == [2, 3, 4]  # BM25's zeros are not matches
    assert candidate_pool(dense, bm25, 10).tolist() == [0, 1, 2, 3, 4]


def _pools(rng: np.random.Generator, queries: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Pools where the relevant candidate shares the component and was filed days before; dense is noise."""
    features, labels = [], []
    for _ in range(queries):
        n = 30
        rel = np.zeros(n, dtype=bool)
        rel[rng.integers(n)] = True
        query = {"product": "p", "component": "c", "created": 1_000 * 86_400.0}
        candidates = [{"product": "p", "component": "c" if r or rng.random() < 0.2 else "d",
                       "created": (1_000 - (rng.uniform(1, 5) if r else rng.uniform(-900, 900))) * 86_400.0}
                      for r in rel]
        features.append(fusion_features(rng.random(n), rng.random(n), query, candidates, CFG))
        labels.append(rel)
    return features, labels


def test_a_fit_finds_the_metadata_signal_and_survives_saving(tmp_path) -> None:
    rng = np.random.default_rng(0)
    fusion = MetadataFusion.fit(*_pools(rng, 60), CFG)
    weights = dict(zip(feature_names(CFG), fusion.weights))
    assert weights["same_component"] > 0 and weights["log_days"] < 0
    held_out, relevant = _pools(rng, 40)
    first = [bool(rel[np.argmax(fusion.score(x))]) for x, rel in zip(held_out, relevant)]
    assert np.mean(first) > 0.8  # a dense-only ranking puts the relevant first 1 time in 30
    loaded = MetadataFusion.load(fusion.save(tmp_path / "fusion.json"))
    np.testing.assert_array_equal(loaded.score(held_out[0]), fusion.score(held_out[0]))
    broken = fusion.to_dict()
    del broken["weights"]["earlier"]
    with pytest.raises(ValueError, match="the config's features are"):
        MetadataFusion.from_dict(broken)
    with pytest.raises(ValueError, match="needs relevant and irrelevant"):
        MetadataFusion.fit([held_out[0]], [np.zeros(len(held_out[0]), dtype=bool)], CFG)


def test_a_stored_time_that_does_not_parse_counts_as_unknown() -> None:
    x = fusion_features(np.ones(2), np.ones(2), {"created": 0}, [{"created": "last tuesday"}, {"created": 86_400}], CFG)
    assert x[:, -1].tolist() == [1.0, 0.0] and x[1, -3] == pytest.approx(math.log(2))


def test_fitted_weights_are_validated_as_data() -> None:
    fitted = MetadataFusion(CFG, np.arange(len(feature_names(CFG)), dtype=float), 0.5).to_dict()
    assert MetadataFusionWeights.model_validate(fitted).weights["dense"] == 2.0
    for broken in ({**fitted, "weights": {**fitted["weights"], "dense": float("nan")}},
                   {**fitted, "bias": float("inf")}, {**fitted, "extra": 1}):
        with pytest.raises(ValueError):
            MetadataFusionWeights.model_validate(broken)


def test_metadata_search_ranks_each_pool_as_the_offline_fusion() -> None:
    """The served search (FAISS top-N, BM25 top-N, exact scores of their union) against the offline rule computed
    from every document's score (`candidate_pool`): the same pools, the same order, with and without excluded ids."""
    from lmplatform.metrics.retrieval import rank_by_score
    from lmplatform.retrieval.index import VectorIndex
    from lmplatform.retrieval.retrievers import BM25Retriever, metadata_search

    rng = np.random.default_rng(3)
    words = ["printer", "vpn", "crash", "save", "font", "table", "macro", "chart", "print", "export"]
    n = 60
    ids = [f"r{i}" for i in range(n)]
    texts = [" ".join(rng.choice(words, size=4)) for _ in range(n)]
    metadata = [{"product": str(rng.choice(["Writer", "Calc"])), "component": str(rng.choice(["ui", "code", "save"])),
                 "created": float(rng.uniform(0, 400)) * 86_400} for _ in range(n)]
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex.build(ids, vectors, kind="flat")
    bm25 = BM25Retriever()
    bm25.index(ids, texts)
    cfg = MetadataFusionConfig(pool=7)
    fusion = MetadataFusion(cfg, np.array([2.0, 1.0, 0.5, 0.8, 0.3, -0.6, 0.4, -0.2]), 0.1)
    queries = [3, 17, 42]
    drop = [{"r3"}, {"r17", ids[int(np.argsort(-(vectors @ vectors[17]))[1])]}, set()]
    served = metadata_search(index, bm25, lambda doc: metadata[ids.index(doc)], vectors[queries], [texts[q] for q in queries],
                             [metadata[q] for q in queries], 5, fusion, drop)
    for q, excluded, hits in zip(queries, drop, served):
        dense, lexical = vectors @ vectors[q], bm25.query_scores([texts[q]])[0].astype(np.float64)
        pool = candidate_pool(dense, lexical, cfg.pool, excluded=[ids.index(d) for d in excluded])
        scores = fusion.score(fusion_features(dense[pool], lexical[pool], metadata[q], [metadata[c] for c in pool], cfg))
        expected = rank_by_score((ids[c], float(s)) for c, s in zip(pool, scores))[:5]
        assert [d for d, _ in hits] == [d for d, _ in expected] and not excluded & {d for d, _ in hits}
        assert [s for _, s in hits] == pytest.approx([s for _, s in expected], abs=1e-5)
