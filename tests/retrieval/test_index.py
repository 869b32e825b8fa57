from pathlib import Path

import numpy as np
import pytest

from lmplatform.retrieval.index import VectorIndex, VectorIndexError, auto_kind


def unit_vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_finds_itself_and_keeps_string_ids_across_adds() -> None:
    vectors = unit_vectors(50)
    index = VectorIndex(32)
    index.add([f"a{i}" for i in range(30)], vectors[:30])
    index.add([f"b{i}" for i in range(20)], vectors[30:])
    hits = index.search(vectors[[0, 29, 30, 49]], k=3)
    assert [h[0][0] for h in hits] == ["a0", "a29", "b0", "b19"]
    assert hits[0][0][1] == pytest.approx(1.0, abs=1e-5)
    assert all(h[0][1] >= h[1][1] >= h[2][1] for h in hits)
    assert len(index) == 50 and index.stats.count == 50 and index.stats.memory_bytes == 50 * 32 * 4
    # k larger than the index returns everything, no padding ids
    assert len(index.search(vectors[0], k=500)[0]) == 50


def test_a_batch_of_queries_finds_what_each_query_finds_alone() -> None:
    # Batches of 4 or more queries take faiss's matrix-product path (import_faiss): same hits as one by one.
    vectors = unit_vectors(2000, dim=48)
    index = VectorIndex(48)
    index.add([str(i) for i in range(2000)], vectors)
    queries = unit_vectors(40, dim=48, seed=3)
    batched = index.search(queries, k=5)
    alone = [index.search(q, k=5)[0] for q in queries]
    assert [[d for d, _ in hits] for hits in batched] == [[d for d, _ in hits] for hits in alone]
    assert np.allclose([[s for _, s in hits] for hits in batched], [[s for _, s in hits] for hits in alone], atol=1e-5)


def test_save_load_round_trip(tmp_path: Path) -> None:
    vectors = unit_vectors(300)
    ids = [f"doc-{i}" for i in range(300)]
    for kind in ("flat", "hnsw"):
        index = VectorIndex.build(ids, vectors, kind=kind)
        before = index.search(vectors[:5], k=5)
        again = VectorIndex.load(index.save(tmp_path / kind))
        assert again.kind == kind and again.ids == ids
        assert again.search(vectors[:5], k=5) == before
        assert again.stats.build_seconds == index.stats.build_seconds
    with pytest.raises(FileNotFoundError, match="ids.json"):
        (tmp_path / "flat" / "ids.json").unlink()
        VectorIndex.load(tmp_path / "flat")


def test_hnsw_and_ivf_recall_against_flat_is_high(capsys: pytest.CaptureFixture) -> None:
    vectors = unit_vectors(2000, dim=32, seed=1)
    ids = [str(i) for i in range(2000)]
    hnsw = VectorIndex.build(ids, vectors, kind="hnsw")
    assert "recall@10 vs exact search" in capsys.readouterr().out
    assert hnsw.stats.recall_at_10 >= 0.95 and hnsw.stats.recall_queries == 200
    ivf = VectorIndex.build(ids, vectors, kind="ivf", nprobe=32)
    assert ivf.stats.recall_at_10 >= 0.9 and ivf.stats.extra["nlist"] > 1
    # independent check on fresh queries
    queries = unit_vectors(50, dim=32, seed=2)
    exact = VectorIndex.build(ids, vectors).search(queries, 10)
    approx = hnsw.search(queries, 10)
    overlap = np.mean([len({d for d, _ in a} & {d for d, _ in e}) / 10 for a, e in zip(approx, exact)])
    assert overlap >= 0.9
    pq = VectorIndex.build(ids, vectors, kind="ivfpq", pq_m=8, nprobe=32)
    assert 0 < pq.stats.recall_at_10 <= 1 and pq.memory_bytes() < hnsw.memory_bytes()
    # counted from the index's parts (serializing a large one at every live upsert copied gigabytes), within 2%
    # of what FAISS writes
    import faiss

    for index in (hnsw, ivf, pq):
        assert index.memory_bytes() == pytest.approx(faiss.serialize_index(index._index).size, rel=0.02)


def test_bad_inputs_are_clear_errors() -> None:
    index = VectorIndex(8)
    with pytest.raises(VectorIndexError, match="empty"):
        index.search(unit_vectors(1, 8), k=1)
    with pytest.raises(VectorIndexError, match=r"shape \[n, 8\]"):
        index.add(["x"], unit_vectors(1, 16))
    index.add(["x", "y"], unit_vectors(2, 8))
    with pytest.raises(VectorIndexError, match="positive"):
        index.search(unit_vectors(1, 8), k=0)
    with pytest.raises(VectorIndexError, match=r"shape \[n, 8\]"):
        index.search(unit_vectors(1, 4), k=1)
    with pytest.raises(VectorIndexError, match="already in the index"):
        index.add(["x"], unit_vectors(1, 8))
    with pytest.raises(VectorIndexError, match="2 ids for 1 vectors"):
        index.add(["p", "q"], unit_vectors(1, 8))
    with pytest.raises(VectorIndexError, match="allowed: flat, flat_fp16, hnsw"):
        VectorIndex(8, kind="annoy")
    with pytest.raises(VectorIndexError, match="NaN"):
        index.add(["z"], np.full((1, 8), np.nan))


def test_auto_kind_by_size() -> None:
    assert auto_kind(1000) == "flat"
    assert auto_kind(500_000) == "hnsw"
    assert auto_kind(5_000_000) == "ivfpq"
    index = VectorIndex(32, kind="auto")
    index.add(["a", "b"], unit_vectors(2))
    assert index.kind == "flat"


def test_flat_fp16_holds_half_of_flat_and_ranks_as_it_does(tmp_path: Path) -> None:
    vectors = unit_vectors(3000, dim=64, seed=4)
    ids = [f"doc-{i}" for i in range(3000)]
    flat = VectorIndex.build(ids, vectors)
    half = VectorIndex.build(ids, vectors, kind="flat_fp16")
    assert half.memory_bytes() == flat.memory_bytes() // 2 == 3000 * 64 * 2
    assert half.stats.recall_at_10 >= 0.99  # measured at build, against exact float32 search
    queries = unit_vectors(50, dim=64, seed=5)
    exact, found = flat.search(queries, 10), half.search(queries, 10)
    overlap = np.mean([len({d for d, _ in a} & {d for d, _ in e}) / 10 for a, e in zip(found, exact)])
    assert overlap >= 0.99
    assert np.allclose([[s for _, s in row] for row in found], [[s for _, s in row] for row in exact], atol=2e-3)
    again = VectorIndex.load(half.save(tmp_path / "half"))
    assert again.kind == "flat_fp16" and again.search(queries[:3], 10) == found[:3]
    assert (tmp_path / "half" / "index.faiss").stat().st_size < 0.6 * 3000 * 64 * 4


@pytest.mark.parametrize("kind", ["flat", "flat_fp16", "hnsw"])
def test_a_removed_vector_is_never_found_and_its_id_can_come_back(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    vectors = unit_vectors(60)
    ids = [f"d{i}" for i in range(60)]
    index = VectorIndex.build(ids, vectors, kind=kind)
    assert index.remove(["d3", "d7", "not-there"]) == 2 and len(index) == 58 and "d3" not in index
    hits = index.search(vectors[[3, 7, 5]], k=5)
    assert all(doc != d for row in hits for doc, _ in row for d in ("d3", "d7"))
    assert [len(row) for row in hits] == [5, 5, 5] and hits[2][0][0] == "d5"
    assert len(index.search(vectors[0], k=500)[0]) == 58  # every vector held, none of the removed
    with pytest.raises(VectorIndexError, match="not in the index"):
        index.reconstruct(["d3"])
    index.add(["d3"], vectors[[3]] * -1)  # the id comes back, with another vector
    assert index.search(vectors[[3]] * -1, k=1)[0][0] == ("d3", pytest.approx(1.0, abs=1e-3))
    assert np.allclose(index.reconstruct(["d3"]), vectors[[3]] * -1, atol=1e-3) and len(index) == 59
    with pytest.raises(VectorIndexError, match="removed vectors"):
        index.save("unused")


@pytest.mark.parametrize("kind", ["flat", "flat_fp16"])
def test_a_flat_index_compacts_its_tombstones(kind: str) -> None:
    import lmplatform.retrieval.index as index_module

    vectors = unit_vectors(40)
    index = VectorIndex.build([f"d{i}" for i in range(40)], vectors, kind=kind)
    index_module_limit = index_module.COMPACT_AT
    try:
        index_module.COMPACT_AT = 3
        index.remove(["d0", "d10"])
        assert len(index.ids) == 40  # below the limit: tombstones
        index.remove(["d20"])
    finally:
        index_module.COMPACT_AT = index_module_limit
    assert len(index.ids) == 37 and index._index.ntotal == 37 and not index._removed
    assert index.search(vectors[[39, 11]], k=1) == [[("d39", pytest.approx(1.0, abs=1e-3))],
                                                    [("d11", pytest.approx(1.0, abs=1e-3))]]
    assert np.allclose(index.reconstruct(["d39", "d1"]), vectors[[39, 1]], atol=1e-3)
