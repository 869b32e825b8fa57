"""Ray Data encoding into parquet shards (a small corpus: in the calling process), then a FAISS index from the
shards."""
from pathlib import Path

import numpy as np
import pytest

from lmplatform.models.encoder import Encoder
from lmplatform.retrieval.build import build_index_from_shards, encode_corpus_to_shards, iter_shards
from lmplatform.retrieval.index import VectorIndex, VectorIndexError
from tests.retrieval.test_index import unit_vectors


def test_ray_encoding_round_trips_ids_and_matches_in_process_encode(ray_session, tiny_bert: Path, tmp_path: Path) -> None:
    import json

    from tests.conftest import write_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=90)
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    stats = encode_corpus_to_shards(corpus, tmp_path / "shards", model=str(tiny_bert), text_fields=["text"],
                                    actors=2, cpus_per_actor=0.5, batch_size=16, rows_per_task=25,
                                    max_seq_length=32)
    assert stats.rows == 90 and stats.shards >= 2
    ids, vectors = zip(*iter_shards(tmp_path / "shards"))
    ids = [i for chunk in ids for i in chunk]
    vectors = np.concatenate(vectors)
    assert sorted(ids) == sorted(r["id"] for r in rows) and len(set(ids)) == 90
    expected = Encoder.from_pretrained(tiny_bert, max_seq_length=32).encode([r["text"] for r in rows])
    by_id = dict(zip((r["id"] for r in rows), expected))
    assert np.allclose(vectors, np.stack([by_id[i] for i in ids]), atol=1e-4)

    built = build_index_from_shards(tmp_path / "shards", tmp_path / "index")
    loaded = VectorIndex.load(tmp_path / "index")
    assert len(loaded) == len(built) == 90
    top = loaded.search(by_id["d7"], k=1)[0][0]
    assert top[0] == "d7" and top[1] == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(FileExistsError, match="already holds parquet shards"):
        encode_corpus_to_shards(corpus, tmp_path / "shards", model=str(tiny_bert))


def test_encoding_actor_encodes_at_its_precision(tiny_bert: Path) -> None:
    from lmplatform.retrieval.build import EncodeBatch

    texts = ["printer crash after restart", "vpn certificate expired", "database timeout"]
    batch = {"id": np.array(["a", "b", "c"]), "text": np.array(texts)}
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=32)
    for precision in ("fp32", "bf16"):
        table = EncodeBatch(str(tiny_bert), ["text"], "id", batch_size=2, max_seq_length=32, precision=precision)(batch)
        vectors = np.stack(table.column("vector").to_numpy(zero_copy_only=False))
        assert table.column("id").to_pylist() == ["a", "b", "c"]
        assert np.allclose(vectors, encoder.encode(texts, batch_size=2, precision=precision), atol=1e-6)


def test_encoding_actor_runs_the_backend_asked_for_or_the_one_auto_chose(tiny_bert: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """backend 'onnx' encodes with ONNX Runtime; 'auto' loads what was chosen for this host and model (cached in
    $LMP_CACHE_DIR, here by a fake timer that favours ONNX int8), with the vectors of that path."""
    from lmplatform.models.encode_path import choose_path
    from lmplatform.retrieval.build import EncodeBatch

    texts = ["printer crash after restart", "vpn certificate expired", "database timeout"]
    batch = {"id": np.array(["a", "b", "c"]), "text": np.array(texts)}
    monkeypatch.setenv("LMP_CACHE_DIR", str(tmp_path))
    choose_path(tiny_bert, max_seq_length=32, batch_size=2, cache=tmp_path / "encode_paths.json",
                timer=lambda encoder, t, b: 0.1 if encoder.quantized else 1.0)
    for backend, quantize in (("onnx", None), ("auto", "int8")):
        actor = EncodeBatch(str(tiny_bert), ["text"], "id", batch_size=2, max_seq_length=32, backend=backend)
        assert actor.encoder.backend == "onnx" and actor.encoder.quantized == (quantize == "int8")
        expected = Encoder.from_pretrained(tiny_bert, max_seq_length=32, backend="onnx", quantize=quantize)
        vectors = np.stack(actor(batch).column("vector").to_numpy(zero_copy_only=False))
        assert np.allclose(vectors, expected.encode(texts, batch_size=2), atol=1e-5)
    # without int8 candidates (a service's `auto_int8: false`, which its rebuilds follow) auto takes the best of the rest
    choose_path(tiny_bert, int8=False, max_seq_length=32, batch_size=2, cache=tmp_path / "encode_paths.json",
                timer=lambda encoder, t, b: 0.1 if encoder.backend == "onnx" else 1.0)
    actor = EncodeBatch(str(tiny_bert), ["text"], "id", batch_size=2, max_seq_length=32, backend="auto", auto_int8=False)
    assert actor.encoder.backend == "onnx" and not actor.encoder.quantized


def test_bm25_index_beside_the_vectors_holds_the_same_texts_and_ids(tmp_path: Path) -> None:
    import json

    from lmplatform.retrieval.build import build_bm25_index
    from lmplatform.retrieval.retrievers import BM25_DIR, BM25Retriever

    rows = [{"id": 1, "title": "printer", "text": "jams every morning"}, {"id": "2", "title": "vpn", "text": "tunnel down"},
            {"title": "no id", "text": "skipped as the encoder skips it"}, {"id": 3, "text": "printer queue stuck"}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = build_bm25_index(corpus, tmp_path / "index", ["title", "text"], expected_ids=["1", "2", "3"])
    assert stats["documents"] == 3 and stats["bytes"] > 0
    loaded = BM25Retriever.load(tmp_path / "index" / BM25_DIR)
    same = BM25Retriever()
    same.index(["1", "2", "3"], ["printer. jams every morning", "vpn. tunnel down", "printer queue stuck"])
    assert loaded.search(["printer jams", "vpn", "queue"], k=3) == same.search(["printer jams", "vpn", "queue"], k=3)
    with pytest.raises(ValueError, match=r"1 missing \(e.g. \['4'\]\), 0 extra"):
        build_bm25_index(corpus, tmp_path / "other", ["text"], expected_ids=["1", "2", "3", "4"])


def test_a_small_corpus_is_encoded_in_this_process_into_one_shard_of_the_same_rows(tiny_bert: Path,
                                                                                    tmp_path: Path) -> None:
    import json

    from tests.conftest import write_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=30)
    rows = [json.loads(line) | {"title": f"title {n}"} for n, line in enumerate(corpus.read_text().splitlines())]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    stats = encode_corpus_to_shards(corpus, tmp_path / "shards", model=str(tiny_bert), text_fields=["title", "text"],
                                    max_seq_length=32, in_process_rows=30)
    assert (stats.rows, stats.shards) == (30, 1)
    [(ids, vectors)] = list(iter_shards(tmp_path / "shards"))
    assert ids == [r["id"] for r in rows]
    expected = Encoder.from_pretrained(tiny_bert, max_seq_length=32).encode([f"{r['title']}. {r['text']}" for r in rows])
    assert np.allclose(vectors, expected, atol=1e-5)

    corpus.write_text(corpus.read_text() + '{"title": "no id here", "text": "x"}\n')
    with pytest.raises(ValueError, match=r"corpus.jsonl:31: no 'id' field"):
        encode_corpus_to_shards(corpus, tmp_path / "more", model=str(tiny_bert), text_fields=["text"])


@pytest.mark.parametrize(("first_line", "message"), [
    ('{"doc": "d0", "title": "t", "text": "x"}', r"corpus .*corpus.jsonl has no 'id' field; fields: \['doc', 'title', 'text'\]"),
    ('{"id": "d0", "title": ', r"corpus.jsonl:2: not valid JSON"),
    ('["d0", "t"]', r"corpus.jsonl:2: expected a JSON object, got list"),
])
def test_a_corpus_without_ids_or_unreadable_is_refused_naming_the_file_before_ray_reads_it(
    tmp_path: Path, first_line: str, message: str
) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n" + first_line + "\n")
    with pytest.raises(ValueError, match=message):
        encode_corpus_to_shards(str(corpus), tmp_path / "shards")


def write_shards(folder: Path, vectors: np.ndarray, rows_per_shard: int) -> list[str]:
    """Parquet shards of (id, vector) as encode_corpus_to_shards writes them; ids `d<row>`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    ids = [f"d{n}" for n in range(len(vectors))]
    for first in range(0, len(vectors), rows_per_shard):
        part = vectors[first:first + rows_per_shard]
        column = pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), vectors.shape[1])
        pq.write_table(pa.table({"id": ids[first:first + rows_per_shard], "vector": column}),
                       folder / f"shard-{first // rows_per_shard:05d}.parquet")
    return ids


def clustered(clusters: int, per_cluster: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    """Unit vectors in `clusters` tight groups, the rows group by group (as a corpus sorted by product would be)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    x = np.repeat(centres, per_cluster, axis=0) + 0.3 * rng.standard_normal((clusters * per_cluster, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_an_index_built_from_many_shards_is_sized_and_trained_for_the_whole_corpus(tmp_path: Path, monkeypatch) -> None:
    from lmplatform.retrieval import index as index_module
    from lmplatform.retrieval.index import MIN_PROBES, IndexParams, default_nlist

    vectors = clustered(clusters=40, per_cluster=100)  # a shard per cluster: the first shard is one cluster
    ids = write_shards(tmp_path / "shards", vectors, rows_per_shard=100)

    ivf = build_index_from_shards(tmp_path / "shards", tmp_path / "ivf", IndexParams(kind="ivf"))
    nlist = default_nlist(4000, 4000)
    assert nlist == 102  # from the 4,000 rows; the first shard's 100 would give 2
    assert ivf.stats.extra["nlist"] == nlist and ivf.stats.extra["training_vectors"] == 4000
    assert len(ivf) == 4000 and ivf.ids == ids
    # recall measured against the exact top 10 over every shard, with queries from all of them, and nprobe
    # calibrated on them to keep the target
    assert ivf.stats.recall_queries == 200 and ivf.stats.recall_at_10 >= 0.98
    assert MIN_PROBES <= ivf.stats.extra["nprobe"] <= nlist
    loaded = VectorIndex.load(tmp_path / "ivf")
    assert loaded._index.nprobe == ivf.stats.extra["nprobe"]
    assert loaded.search(vectors[3500], 1)[0][0][0] == "d3500"

    # `auto` chooses by the corpus's 4,000 rows, not by its first shard's 100
    monkeypatch.setattr(index_module, "AUTO_FLAT_MAX", 1000)
    auto = build_index_from_shards(tmp_path / "shards", tmp_path / "auto", IndexParams(kind="auto"))
    assert auto.kind == "hnsw" and auto.stats.recall_queries == 200 and auto.stats.recall_at_10 >= 0.95
    flat = build_index_from_shards(tmp_path / "shards", tmp_path / "flat", IndexParams(kind="flat"))
    assert flat.stats.recall_at_10 is None  # exact: nothing to measure


def test_ivf_probes_the_fewest_lists_that_keep_the_target_recall_unless_told() -> None:
    from lmplatform.retrieval.index import MIN_PROBES

    vectors = unit_vectors(6000, dim=24, seed=1)  # no clusters: IVF needs many probes
    ids = [str(n) for n in range(len(vectors))]
    strict = VectorIndex.build(ids, vectors, kind="ivf")
    nlist, probes = strict.stats.extra["nlist"], strict._index.nprobe
    assert strict.stats.recall_at_10 >= 0.98 and MIN_PROBES < probes < nlist
    # the fewest: half as many probes miss the target on fresh queries
    strict._index.nprobe = probes // 2
    queries = unit_vectors(200, dim=24, seed=5)
    exact = VectorIndex.build(ids, vectors).search(queries, 10)
    assert np.mean([len({d for d, _ in a} & {d for d, _ in e}) / 10 for a, e in zip(strict.search(queries, 10), exact)]) < 0.98
    loose = VectorIndex.build(ids, vectors, kind="ivf", target_recall=0.5)
    assert loose._index.nprobe == MIN_PROBES and loose.stats.extra["nprobe"] == MIN_PROBES
    told = VectorIndex.build(ids, vectors, kind="ivf", nprobe=3)
    assert told._index.nprobe == 3 and told.stats.recall_at_10 < 0.98  # measured, never overridden
    with pytest.raises(VectorIndexError, match="already created"):
        told.create(len(vectors), vectors)
    with pytest.raises(VectorIndexError, match="index kind ivf needs training vectors"):
        VectorIndex(24, kind="ivf").create(len(vectors))
    with pytest.raises(VectorIndexError, match=r"target_recall must be in \(0, 1\]"):
        VectorIndex(24, kind="ivf", target_recall=1.5)
