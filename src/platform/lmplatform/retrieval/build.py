"""Corpus-scale index building: Ray Data encodes, parquet shards hold (id, vector), FAISS indexes the shards.

1. `encode_corpus_to_shards` reads the corpus with Ray Data, encodes it with
   `map_batches` on a pool of actors that each hold the model (loaded once per
   actor), and writes parquet shards with columns `id` (string) and `vector`
   (fixed_size_list<float32>[dim]). The driver only plans the pipeline: it never
   holds the texts or the vectors. A corpus of at most `IN_PROCESS_ROWS` rows, for
   one actor, is encoded in the calling process instead, into one shard of the same
   columns: one actor encodes no faster than the caller, and takes seconds to start.
2. `build_index_from_shards` creates a `VectorIndex` for the whole corpus (`auto` and IVF's lists sized by its
   row count, IVF trained on rows drawn across every shard), adds the shards one file at a time and saves it
   with its id mapping.
3. `build_bm25_index` indexes the same texts with BM25 (bm25s) into `bm25/` of the
   index folder, for hybrid search. It reads the corpus on the driver: bm25s holds
   every document's tokens while it indexes.
"""
from __future__ import annotations

import glob
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from lmplatform.data.fields import join_fields
from lmplatform.data.readers import BadRow, detect_format, read_rows
from lmplatform.models.encode_path import choose_path
from lmplatform.models.resolve import resolve_model_path
from lmplatform.retrieval.faiss_import import exact_search
from lmplatform.retrieval.index import TRAINED_KINDS, TRAINING_PER_LIST, IndexParams, VectorIndex, default_nlist
from lmplatform.retrieval.retrievers import BM25_DIR, BM25Retriever
from lmplatform.retrieval.settings import MetadataFusionConfig
from lmplatform.retrieval.store import DOCUMENTS_FILE, MetadataAudit, write_document_store

logger = logging.getLogger(__name__)

# A corpus of up to this many rows, for one actor, is encoded in the calling process: one actor encodes no faster than
# the caller, and on a busy 2-core machine the Ray Data job spends 10-15 s starting it. A larger corpus stays off the
# caller's memory, encoded on the cluster.
IN_PROCESS_ROWS = 2_000
_IN_PROCESS_BYTES = 64 * 2**20  # a larger corpus file is never read on the driver just to count its rows


class EncodeBatch:
    """A Ray Data actor: holds one Encoder and turns a batch of rows into (id, vector) rows."""

    def __init__(self, model: str, text_fields: Sequence[str], id_field: str, batch_size: int,
                 quantize: Optional[str] = None, max_seq_length: Optional[int] = None, num_threads: Optional[int] = None,
                 precision: str = "fp32", backend: str = "torch", auto_int8: bool = True):
        """backend 'auto': the fastest path on this actor's host (models/encode_path.py; int8 paths among the
        candidates with `auto_int8`), which then sets the quantization and precision; otherwise
        `Encoder.from_pretrained`'s backend."""
        import torch

        from lmplatform.models.encoder import Encoder

        if num_threads:
            torch.set_num_threads(num_threads)  # before any timing: the threads the encodes will have
        if backend == "auto":
            choice, self.encoder = choose_path(resolve_model_path(model), int8=auto_int8, max_seq_length=max_seq_length,
                                               batch_size=batch_size)
            precision = choice.path.precision
        else:
            self.encoder = Encoder.from_pretrained(model, max_seq_length=max_seq_length, quantize=quantize,  # type: ignore[arg-type]
                                                   backend=backend)  # type: ignore[arg-type]
        self.text_fields, self.id_field = list(text_fields), id_field
        self.batch_size, self.num_threads, self.precision = batch_size, num_threads, precision

    def __call__(self, batch: dict[str, np.ndarray]) -> Any:
        import pyarrow as pa

        n = len(batch[self.id_field])
        rows = ({f: batch[f][i] for f in self.text_fields if f in batch} for i in range(n))
        texts = [join_fields(r, self.text_fields) for r in rows]
        vectors = self.encoder.encode(texts, batch_size=self.batch_size, num_threads=self.num_threads,
                                      precision=self.precision)  # type: ignore[arg-type]
        dim = vectors.shape[1]
        return pa.table({
            "id": pa.array([str(x) for x in batch[self.id_field]], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim),
        })


@dataclass
class EncodeStats:
    rows: int
    seconds: float
    shards: int
    output_dir: str

    @property
    def rows_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


def encode_corpus_to_shards(
    corpus: str | Sequence[str],
    output_dir: str | Path,
    model: str = "default",
    text_fields: Sequence[str] = ("title", "text"),
    id_field: str = "id",
    actors: int = 1,
    cpus_per_actor: float = 1,
    batch_size: int = 64,
    rows_per_task: int = 1024,
    quantize: Optional[str] = None,
    max_seq_length: Optional[int] = None,
    precision: str = "fp32",
    backend: str = "torch",
    in_process_rows: int = IN_PROCESS_ROWS,
    auto_int8: bool = True,
) -> EncodeStats:
    """Encode a JSONL/parquet corpus on Ray actors into parquet shards of (id, vector); for one actor, a corpus of
    files holding at most `in_process_rows` rows in this process, into one shard."""
    import ray

    output_dir = Path(output_dir)
    if output_dir.exists() and any(output_dir.glob("*.parquet")):
        raise FileExistsError(f"{output_dir} already holds parquet shards; choose an empty folder")
    paths = [corpus] if isinstance(corpus, (str, Path)) else list(corpus)
    paths = [str(Path(p).resolve()) for p in paths]
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"corpus not found: {p}")
    start = time.perf_counter()
    fields = _first_row_fields(paths[0])
    if fields is not None and id_field not in fields:
        raise ValueError(f"corpus {paths[0]} has no {id_field!r} field; fields: {fields}")
    encoder_args = {"model": str(model), "text_fields": list(text_fields), "id_field": id_field,
                    "batch_size": batch_size, "quantize": quantize, "max_seq_length": max_seq_length,
                    "num_threads": max(1, int(cpus_per_actor)), "precision": precision, "backend": backend,
                    "auto_int8": auto_int8}
    small = _small_corpus(paths, id_field, in_process_rows) if actors == 1 else None
    if small is not None:
        return _encode_here(small, output_dir, encoder_args, start)
    # Reads take no CPU slot: they are short and I/O-bound, and the encoder actors may hold
    # every CPU of the cluster (a reader waiting on a slot would then wait forever).
    reader_args = {"ray_remote_args": {"num_cpus": 0}}
    dataset = (ray.data.read_parquet(paths, **reader_args) if paths[0].endswith(".parquet")
               else ray.data.read_json(paths, lines=True, **reader_args))
    if fields is None:  # a folder: Ray Data reads its first rows (a job of its own, seconds on a busy cluster)
        fields = dataset.schema().names
        if id_field not in fields:
            raise ValueError(f"corpus {paths[0]} has no {id_field!r} field; fields: {fields}")
    encoded = dataset.map_batches(
        EncodeBatch,
        fn_constructor_kwargs=encoder_args,
        batch_size=rows_per_task,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor,
    )
    # The writes take no CPU slot either: Ray Data runs them as tasks apart from the encoder actors, and beside a
    # serving application (a live index's rebuild) the CPUs the actors leave may be less than one.
    encoded.write_parquet(str(output_dir), ray_remote_args={"num_cpus": 0})
    return _encoded(output_dir, start)


def _encoded(output_dir: Path, start: float) -> EncodeStats:
    seconds = time.perf_counter() - start
    shards = sorted(glob.glob(str(output_dir / "*.parquet")))
    rows = sum(_parquet_rows(s) for s in shards)
    stats = EncodeStats(rows, seconds, len(shards), str(output_dir))
    logger.info("encoded %d rows into %d shards in %.1fs (%.1f rows/s)", rows, len(shards), seconds, stats.rows_per_second)
    return stats


def _small_corpus(paths: list[str], id_field: str, max_rows: int) -> Optional[list[dict[str, Any]]]:
    """Every row of the corpus files `paths`, if they hold at most `max_rows`; None for more rows or a folder. A row
    that is not a JSON object, or has no id, is refused with its file and line."""
    files = [Path(p) for p in paths]
    if max_rows <= 0 or not all(f.is_file() for f in files) or sum(f.stat().st_size for f in files) > _IN_PROCESS_BYTES:
        return None
    rows: list[dict[str, Any]] = []
    for path in paths:
        for row in read_rows(path, "parquet" if path.endswith(".parquet") else "jsonl"):
            if isinstance(row, BadRow):
                raise ValueError(str(row))
            if row.fields.get(id_field) is None:
                raise ValueError(f"{row.path}:{row.line}: no {id_field!r} field")
            rows.append(row.fields)
            if len(rows) > max_rows:
                return None
    return rows


def _encode_here(rows: list[dict[str, Any]], output_dir: Path, encoder_args: dict[str, Any], start: float) -> EncodeStats:
    """`rows` encoded by one `EncodeBatch` in this process, written as one shard."""
    import pyarrow.parquet as pq

    id_field = encoder_args["id_field"]
    output_dir.mkdir(parents=True, exist_ok=True)
    if rows:
        batch = {}  # Ray Data's numpy batch of the fields read: one object column each
        for name in [id_field, *encoder_args["text_fields"]]:
            if any(name in row for row in rows):
                batch[name] = np.empty(len(rows), dtype=object)
                batch[name][:] = [row.get(name) for row in rows]
        pq.write_table(EncodeBatch(**encoder_args)(batch), output_dir / "shard-00000.parquet")
    return _encoded(output_dir, start)


def _first_row_fields(path: str) -> Optional[list[str]]:
    """The fields of a corpus file's first row (a parquet file's schema); None for a folder."""
    if not Path(path).is_file():
        return None
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    first = next(read_rows(path, "jsonl"), None)  # Ray Data reads any other file as JSON lines
    if isinstance(first, BadRow):
        raise ValueError(str(first))
    return [] if first is None else list(first.fields)


def _parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def _shard_files(shards_dir: str | Path) -> list[str]:
    files = sorted(glob.glob(str(Path(shards_dir) / "*.parquet")))
    if not files:
        raise FileNotFoundError(f"no parquet shards in {shards_dir}")
    return files


def _vector_dim(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_schema(path).field("vector").type.list_size)


def _read_shard(path: str) -> tuple[list[str], np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["id", "vector"])
    column = table.column("vector").combine_chunks()
    dim = column.type.list_size
    vectors = column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float32, copy=False)
    return table.column("id").to_pylist(), vectors


def iter_shards(shards_dir: str | Path) -> Iterator[tuple[list[str], np.ndarray]]:
    """(ids, vectors [n, dim] float32) for each parquet shard, in file-name order."""
    for path in _shard_files(shards_dir):
        if _parquet_rows(path):
            yield _read_shard(path)


def _rows_at(files: list[str], counts: list[int], rows: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The ids and vectors at the corpus rows `rows` (sorted, counted across `files` in order), a shard read at a
    time."""
    ids: list[str] = []
    vectors, first = [], 0
    for path, count in zip(files, counts):
        local = rows[(rows >= first) & (rows < first + count)] - first
        if len(local):
            shard_ids, shard_vectors = _read_shard(path)
            ids += [shard_ids[n] for n in local]
            vectors.append(shard_vectors[local])
        first += count
    return ids, np.concatenate(vectors)


def _merge_top_k(best: Optional[tuple[np.ndarray, np.ndarray]], scores: np.ndarray, ids: np.ndarray, k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The k best (scores, ids) [q, k] of each query among `best`'s and a shard's."""
    if best is not None:
        scores, ids = np.concatenate([best[0], scores], axis=1), np.concatenate([best[1], ids], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def build_index_from_shards(shards_dir: str | Path, index_dir: str | Path, params: Optional[IndexParams] = None) -> VectorIndex:
    """Every shard added to one VectorIndex, saved (index.faiss, ids.json, index_meta.json).

    The index is created for the whole corpus before the first shard is added: `auto` chooses its kind by the
    corpus's size, and an IVF kind sizes its lists by it and trains on TRAINING_PER_LIST rows per list drawn across
    every shard (shards come in the order Ray Data wrote them, which may follow the corpus's order: by product or
    by date). An approximate kind's recall@10 against exact search is measured for `recall_sample` corpus rows as
    queries, their exact top 11 (themselves and 10 more) gathered shard by shard; an IVF kind's nprobe is
    calibrated on them (`VectorIndex.record_recall`)."""
    files = _shard_files(shards_dir)
    counts = [_parquet_rows(path) for path in files]
    total = sum(counts)
    if not total:
        raise ValueError(f"the shards in {shards_dir} hold no rows")
    index = VectorIndex(_vector_dim(files[0]), params or IndexParams())
    kind = index.resolved_kind(total)
    training = min(total, TRAINING_PER_LIST * (index.params.nlist or default_nlist(total, total))) if kind in TRAINED_KINDS else 0
    rng = np.random.default_rng(0)
    sample = _rows_at(files, counts, np.sort(rng.choice(total, size=training, replace=False))) if training else None
    index.create(total, sample[1] if sample is not None else None)
    queries: Optional[tuple[list[str], np.ndarray]] = None
    if kind != "flat":
        rows = rng.choice(total, size=min(index.params.recall_sample, total), replace=False)
        queries = _rows_at(files, counts, np.sort(rows))
    k, best = min(11, total), None  # each query's own row, and the 10 after it
    for ids, vectors in iter_shards(shards_dir):
        index.add(ids, vectors, measure_recall=False)
        if queries is not None:
            scores, rows = exact_search(queries[1], vectors, min(k, len(ids)))
            best = _merge_top_k(best, scores, np.asarray(ids, dtype=object)[rows], k)
    if queries is not None and best is not None:
        index.record_recall(queries[1], queries[0], [list(row) for row in best[1]])
    index.save(index_dir)
    (Path(index_dir) / "build.json").write_text(json.dumps({"shards_dir": str(shards_dir), "count": len(index)}, indent=2))
    return index


def build_bm25_index(corpus: str | Sequence[str], index_dir: str | Path, text_fields: Sequence[str] = ("title", "text"),
                     id_field: str = "id", expected_ids: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """BM25 over the corpus texts as the encoder read them (`text_fields` joined with '. '), saved into
    `index_dir/bm25`; `expected_ids` (the FAISS index's) must be exactly the ids indexed.

    Returns {documents, seconds, bytes}. Rows without an id are skipped, as the encoding skips them.
    """
    start = time.perf_counter()
    ids, texts = [], []
    for path in [corpus] if isinstance(corpus, (str, Path)) else corpus:
        for row in read_rows(str(path), detect_format(path)):
            if isinstance(row, BadRow) or row.fields.get(id_field) is None:
                continue
            ids.append(str(row.fields[id_field]))
            texts.append(join_fields(row.fields, list(text_fields)))
    if expected_ids is not None and set(ids) != set(expected_ids):
        missing, extra = set(expected_ids) - set(ids), set(ids) - set(expected_ids)
        raise ValueError(f"the corpus read for BM25 holds other ids than the vector index: {len(missing)} missing "
                         f"(e.g. {sorted(missing)[:3]}), {len(extra)} extra (e.g. {sorted(extra)[:3]})")
    retriever = BM25Retriever()
    retriever.index(ids, texts)
    folder = retriever.save(Path(index_dir) / BM25_DIR)
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return {"documents": len(ids), "seconds": round(time.perf_counter() - start, 2), "bytes": size}


@dataclass
class IndexFolder:
    """What `build_index_folder` made: the folder `lmp serve` loads, and how it went."""

    folder: Path
    encode: EncodeStats
    index: VectorIndex
    documents: int
    bm25: Optional[dict[str, Any]]
    # `MetadataAudit.summary()` of the store: per metadata field, the values a fusion cannot read, with examples.
    metadata: dict[str, Any] = field(default_factory=dict)


def build_index_folder(corpus: str | Sequence[str], out: str | Path, model: str = "default",
                       text_fields: Sequence[str] = ("title", "text"), id_field: str = "id", actors: int = 1,
                       cpus_per_actor: float = 1, batch_size: int = 64, quantize: Optional[str] = None,
                       params: Optional[IndexParams] = None, bm25: bool = True, label_field: Optional[str] = None,
                       max_seq_length: Optional[int] = None, metadata_fields: Sequence[str] = (),
                       time_fields: Optional[Sequence[str]] = None, backend: str = "torch") -> IndexFolder:
    """The served index of a corpus in `out/index`: FAISS over the encoded texts (shards in `out/shards`), BM25 over
    the same texts (unless `bm25` is False) and the document store (id, title, text, label, the `metadata_fields` a
    metadata fusion reads) hits are shown from. `time_fields`: the metadata fields read as times (default: the
    default fusion's time field, when among them); the values the store loses are counted (`IndexFolder.metadata`)."""
    if time_fields is None:
        time_fields = [f for f in [MetadataFusionConfig().time_field] if f in metadata_fields]
    audit = MetadataAudit(time_fields=list(time_fields))
    out = Path(out)
    stats = encode_corpus_to_shards(corpus, out / "shards", model=model, text_fields=text_fields, id_field=id_field,
                                    actors=actors, cpus_per_actor=cpus_per_actor, batch_size=batch_size, quantize=quantize,
                                    max_seq_length=max_seq_length, backend=backend)
    index = build_index_from_shards(out / "shards", out / "index", params)
    built_bm25 = build_bm25_index(corpus, out / "index", text_fields, id_field, index.ids) if bm25 else None
    stored = write_document_store(corpus, out / "index" / DOCUMENTS_FILE, id_field=id_field,
                                  text_fields=[f for f in text_fields if f != "title"] or list(text_fields),
                                  label_field=label_field, metadata_fields=metadata_fields, audit=audit)
    return IndexFolder(out / "index", stats, index, stored, built_bm25, audit.summary() if metadata_fields else {})
