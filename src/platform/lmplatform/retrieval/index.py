"""`VectorIndex`: a FAISS inner-product index with string ids, save/load and build statistics.

Vectors are expected L2-normalised (as `Encoder.encode` returns them), so inner
product is cosine similarity.

Kinds:
- `flat`  exact search (IndexFlatIP). The default, and the reference for recall.
- `flat_fp16` exhaustive search over vectors stored as float16 (IndexScalarQuantizer QT_fp16): half `flat`'s
          memory, the same ranking but for near ties (scores differ by about 1e-3); no training.
- `hnsw`  graph search (IndexHNSWFlat); no training, fast queries, ~ +M*8 bytes per vector.
- `ivf`   inverted lists (IndexIVFFlat); trained by k-means on the first `add`.
- `ivfpq` inverted lists with product-quantized codes (IndexIVFPQ); ~ `pq_m` bytes per vector.
- `auto`  chosen by corpus size at the first `add`: flat up to `AUTO_FLAT_MAX` vectors
          (exact search of 2e5 x 384 floats takes a few ms per query), hnsw up to
          `AUTO_HNSW_MAX`, ivfpq beyond (HNSW's memory grows too large there).

An index built in parts (`build_index_from_shards`) calls `create` first with the whole corpus's size and a
training sample drawn across it, so `auto` and nlist are chosen for the corpus, not for its first part.

For the other kinds, the build measures recall@10 against exact search, with a sample of the indexed vectors as
queries (each query's own row left out of its truth and its hits: a row always finds itself), logs it and stores
it in `stats`. An IVF kind without a set `nprobe` is calibrated there: it probes the fewest lists of 16, 32,
64, ... that keep `target_recall` of the exact top 10, or stops where doubling them gains under 0.002 (ivfpq's
codes bound its recall). No fixed share of lists suits every corpus: over 10^5 report vectors in 1,264 lists,
real queries needed 512 probes for 0.988 of the exact top 10; over 10^6 recombined ones in 4,000 lists, 256 kept
0.985 (docs/benchmarks.md).

`remove` takes documents out of a live index (the served index under document changes). A removed vector
stays in FAISS as a tombstone at its position until `compact`: a search asks FAISS for as many more hits as
there are tombstones and drops theirs. A flat index compacts itself once `COMPACT_AT` tombstones pile up
(FAISS removes its rows in one pass), and so does flat_fp16; the other kinds keep them until the index is built again.
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.metrics.retrieval import rank_by_score
from lmplatform.retrieval.faiss_import import exact_search, import_faiss
from lmplatform.retrieval.settings import INDEX_KINDS, IndexKind

logger = logging.getLogger(__name__)

BYTES_PER_COMPONENT = {"flat": 4, "flat_fp16": 2}
EXHAUSTIVE_KINDS = tuple(BYTES_PER_COMPONENT)  # a row per vector: FAISS drops a removed one's row in place
AUTO_FLAT_MAX = 200_000
AUTO_HNSW_MAX = 2_000_000
INDEX_FILE = "index.faiss"
IDS_FILE = "ids.json"
META_FILE = "index_meta.json"
COMPACT_AT = 256  # tombstones a flat index holds before `remove` compacts it


class VectorIndexError(ValueError):
    """Bad input to a VectorIndex (dimension, ids, k, untrained index)."""


@dataclass
class IndexParams:
    kind: IndexKind = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: Optional[int] = None  # None: about 4 * sqrt(n), at least 39 training vectors per list
    nprobe: Optional[int] = None  # None: calibrated at build to keep target_recall (see the module doc)
    target_recall: float = 0.98  # recall@10 against exact search that a calibrated nprobe keeps on the sample
    pq_m: int = 48  # sub-quantizers for ivfpq; must divide dim
    recall_sample: int = 200  # queries used to measure recall@10 against exact search

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise VectorIndexError(f"index kind {self.kind!r} is not supported; allowed: {', '.join(INDEX_KINDS)}")
        for name in ("hnsw_m", "ef_construction", "ef_search", "nprobe", "pq_m"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise VectorIndexError(f"index parameter {name} must be positive, got {getattr(self, name)}")
        if not 0 < self.target_recall <= 1:
            raise VectorIndexError(f"index parameter target_recall must be in (0, 1], got {self.target_recall}")


@dataclass
class IndexStats:
    kind: str = ""
    count: int = 0
    dim: int = 0
    build_seconds: float = 0.0
    train_seconds: float = 0.0
    memory_bytes: int = 0
    recall_at_10: Optional[float] = None  # approximate kinds only
    recall_queries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


TRAINED_KINDS = ("ivf", "ivfpq")
MIN_PROBES = 16  # an IVF index's nprobe until calibrated, and the first one its calibration tries
SATURATED_GAIN = 0.002  # a calibration stops when doubling nprobe gains less recall than this
TRAINING_PER_LIST = 64  # training vectors per list `build_index_from_shards` samples (FAISS asks 39 to 256)


def auto_kind(count: int) -> str:
    if count <= AUTO_FLAT_MAX:
        return "flat"
    if count <= AUTO_HNSW_MAX:
        return "hnsw"
    return "ivfpq"


def default_nlist(total: int, training: int) -> int:
    """Inverted lists for `total` vectors: about 4 * sqrt(total), with at least 39 of `training` vectors per list."""
    return max(1, min(int(4 * math.sqrt(total)), training // 39))


class VectorIndex:
    def __init__(self, dim: int, params: Optional[IndexParams] = None, **overrides: Any):
        if dim <= 0:
            raise VectorIndexError(f"dim must be positive, got {dim}")
        self.dim = int(dim)
        self.params = params or IndexParams(**overrides)
        if params is not None and overrides:
            self.params = IndexParams(**{**asdict(params), **overrides})
        self.kind: str = self.params.kind if self.params.kind != "auto" else ""
        self.ids: list[str] = []  # by position; a removed id stays listed at its position until `compact`
        self._positions: dict[str, int] = {}  # the ids held, to their positions
        self._removed: set[int] = set()  # positions of removed vectors (tombstones)
        self._index: Any = None
        self.stats = IndexStats(kind=self.kind, dim=self.dim)

    # ------------------------------------------------------------------ build
    def resolved_kind(self, total: int) -> str:
        """The kind this index takes for a corpus of `total` vectors (`auto` chooses by size)."""
        return self.kind or auto_kind(total)

    def create(self, total: int, training: Optional[np.ndarray] = None) -> None:
        """Make the empty FAISS index for a corpus of `total` vectors, to be added in parts: `auto` chooses by
        `total`, and an IVF kind sizes its lists by `total` and trains on `training` (rows drawn across the corpus).
        `add` calls this itself, for the vectors of its first call, when nothing created the index before."""
        if self._index is not None:
            raise VectorIndexError("the index is already created")
        if self.resolved_kind(total) in TRAINED_KINDS and (training is None or not len(training)):
            raise VectorIndexError(f"index kind {self.resolved_kind(total)} needs training vectors")
        sample = self._as_matrix(training, "training vectors") if training is not None else np.zeros((0, self.dim), np.float32)
        start = time.perf_counter()
        self._create(sample, total)
        self.stats.build_seconds += time.perf_counter() - start

    def _create(self, sample: np.ndarray, total: int) -> None:
        faiss = import_faiss()
        n = len(sample)
        if not self.kind:
            self.kind = auto_kind(total)
            logger.info("index kind auto-selected: %s for %d vectors", self.kind, total)
        p = self.params
        if self.kind == "flat":
            self._index = faiss.IndexFlatIP(self.dim)
        elif self.kind == "flat_fp16":
            self._index = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        elif self.kind == "hnsw":
            self._index = faiss.IndexHNSWFlat(self.dim, p.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self._index.hnsw.efConstruction = p.ef_construction
            self._index.hnsw.efSearch = p.ef_search
        else:
            nlist = p.nlist or default_nlist(total, n)
            if n < nlist:
                raise VectorIndexError(f"{self.kind} needs at least nlist={nlist} vectors to train, got {n}")
            quantizer = faiss.IndexFlatIP(self.dim)
            if self.kind == "ivf":
                self._index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            else:
                if self.dim % p.pq_m:
                    raise VectorIndexError(f"pq_m={p.pq_m} must divide the dimension {self.dim}")
                self._index = faiss.IndexIVFPQ(quantizer, self.dim, nlist, p.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
            self._quantizer = quantizer  # faiss does not own it from Python; keep it alive
            start = time.perf_counter()
            self._index.train(sample)
            self.stats.train_seconds = time.perf_counter() - start
            self._index.nprobe = min(p.nprobe or MIN_PROBES, nlist)
            self.stats.extra.update(nlist=nlist, nprobe=self._index.nprobe, training_vectors=n)
        self.stats.kind = self.kind

    def _as_matrix(self, vectors: np.ndarray, what: str) -> np.ndarray:
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2 or array.shape[1] != self.dim:
            raise VectorIndexError(f"{what} must have shape [n, {self.dim}], got {list(np.shape(vectors))}")
        if not np.isfinite(array).all():
            raise VectorIndexError(f"{what} contain NaN or infinite values")
        return np.ascontiguousarray(array)

    def add(self, ids: Sequence[str], vectors: np.ndarray, measure_recall: bool = True) -> IndexStats:
        """Add vectors under string ids; ids must be new and unique."""
        matrix = self._as_matrix(vectors, "vectors")
        ids = [str(i) for i in ids]
        if len(ids) != len(matrix):
            raise VectorIndexError(f"{len(ids)} ids for {len(matrix)} vectors")
        if len(set(ids)) != len(ids):
            raise VectorIndexError("ids within one add are not unique")
        clash = [i for i in ids if i in self._positions]
        if clash:
            raise VectorIndexError(f"{len(clash)} ids are already in the index, e.g. {clash[:3]}")
        if not len(ids):
            return self.stats
        first_add = self._index is None
        start = time.perf_counter()
        if first_add:
            self._create(matrix, len(matrix))
        self._index.add(matrix)
        self.stats.build_seconds += time.perf_counter() - start  # includes IVF training on the first add
        for i in ids:
            self._positions[i] = len(self.ids)
            self.ids.append(i)
        self.stats.count = len(self)
        self.stats.memory_bytes = self.memory_bytes()
        if measure_recall and first_add and self.kind != "flat":
            self.measure_recall(matrix)
        return self.stats

    def memory_bytes(self) -> int:
        """What the FAISS index occupies in RAM, within a few % of its serialized size, counted from its parts:
        serializing it to measure it copied gigabytes at every live upsert of a large HNSW or IVF index."""
        index = self._index
        if index is None:
            return 0
        if self.kind in EXHAUSTIVE_KINDS:
            return int(index.ntotal) * self.dim * BYTES_PER_COMPONENT[self.kind]
        if self.kind == "hnsw":
            graph = index.hnsw
            links = 4 * (graph.neighbors.size() + graph.levels.size()) + 8 * graph.offsets.size()
            return int(index.ntotal) * self.dim * 4 + links
        # ivf, ivfpq: each vector's code and id in its list, the coarse centroids, and ivfpq's codebooks (8 bits)
        codebooks = self.dim * 256 * 4 if self.kind == "ivfpq" else 0
        return int(index.ntotal) * (int(index.code_size) + 8) + int(index.nlist) * self.dim * 4 + codebooks

    def measure_recall(self, vectors: np.ndarray, k: int = 10) -> float:
        """Recall@k against exact search when the index holds exactly `vectors` (in order): sampled rows of
        `vectors` are the queries, their exact top k + 1 over `vectors` the truth. `add` calls this on the first
        add, i.e. when the index is built."""
        if self._index is None or self._index.ntotal != len(vectors):
            raise VectorIndexError("measure_recall needs the exact set of vectors the index holds")
        rng = np.random.default_rng(0)
        rows = rng.choice(len(vectors), size=min(self.params.recall_sample, len(vectors)), replace=False)
        queries = np.ascontiguousarray(vectors[rows])
        _, truth = exact_search(queries, vectors, min(k + 1, len(vectors)))
        return self.record_recall(queries, [self.ids[row] for row in rows],
                                  [[self.ids[found] for found in row] for row in truth])

    def record_recall(self, queries: np.ndarray, own_ids: Sequence[str], truth: Sequence[Sequence[str]]) -> float:
        """Recall of this index's top k against exact search for `queries` [q, dim], indexed rows whose ids are
        `own_ids`, given each one's exact top k + 1 ids `truth`; a query's own id is left out of both (a row always
        finds itself). An IVF kind without a set nprobe is calibrated first (see the module doc). Kept in `stats`,
        logged and printed."""
        k = max(1, len(truth[0]) - 1)
        wanted = [[doc for doc in row if doc != own][:k] for row, own in zip(truth, own_ids)]

        def recall() -> float:
            if not any(wanted):  # an index of one vector: nothing but the query itself to find
                return 1.0
            found = self.search(queries, k + 1)
            return sum(len(set(want) & set([doc for doc, _ in hits if doc != own][:k]))
                       for want, hits, own in zip(wanted, found, own_ids)) / sum(map(len, wanted))

        measured = recall()
        if self.kind in TRAINED_KINDS and self.params.nprobe is None:
            while measured < self.params.target_recall and self._index.nprobe < self._index.nlist:
                before = (self._index.nprobe, measured)
                self._index.nprobe = min(2 * self._index.nprobe, self._index.nlist)
                measured = recall()
                if measured - before[1] < SATURATED_GAIN:  # ivfpq's codes, not its probes, bound it: stay cheap
                    self._index.nprobe, measured = before
                    break
            self.stats.extra["nprobe"] = self._index.nprobe
        self.stats.recall_at_10 = round(measured, 4)
        self.stats.recall_queries = len(wanted)
        probes = f" with nprobe {self._index.nprobe} of {self._index.nlist}" if self.kind in TRAINED_KINDS else ""
        logger.info("%s index: recall@%d vs exact = %.4f over %d queries%s", self.kind, k, measured, len(wanted), probes)
        print(f"[VectorIndex] {self.kind}: recall@{k} vs exact search = {measured:.4f} ({len(wanted)} sampled queries{probes})")
        return measured

    # ---------------------------------------------------------------- removal
    def remove(self, ids: Sequence[str]) -> int:
        """Take `ids` out of the index (ids it does not hold are ignored); returns how many it held."""
        removed = 0
        for doc_id in ids:
            position = self._positions.pop(str(doc_id), None)
            if position is not None:
                self._removed.add(position)
                removed += 1
        self.stats.count = len(self)
        if self.kind in EXHAUSTIVE_KINDS and len(self._removed) >= COMPACT_AT:
            self.compact()
        return removed

    def compact(self) -> None:
        """Drop the tombstones of a flat or flat_fp16 index (its rows after them move up); other kinds keep theirs."""
        if not self._removed or self.kind not in EXHAUSTIVE_KINDS:
            return
        faiss = import_faiss()
        self._index.remove_ids(faiss.IDSelectorBatch(np.fromiter(sorted(self._removed), dtype=np.int64)))
        self.ids = [doc_id for position, doc_id in enumerate(self.ids) if position not in self._removed]
        self._positions = {doc_id: position for position, doc_id in enumerate(self.ids)}
        self._removed = set()
        self.stats.memory_bytes = self.memory_bytes()

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._positions

    def held_ids(self) -> list[str]:
        """The ids held, in position order (`ids` without the removed ones)."""
        return [doc_id for position, doc_id in enumerate(self.ids) if position not in self._removed]

    # ----------------------------------------------------------------- search
    def __len__(self) -> int:
        return len(self._positions)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Top-k (id, score) lists, one per query, best first (equal scores: smaller id first)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise VectorIndexError(f"k must be a positive integer, got {k!r}")
        if self._index is None or not self._positions:
            raise VectorIndexError("the index is empty: add vectors before searching")
        matrix = self._as_matrix(queries, "queries")
        scores, positions = self._index.search(matrix, min(int(k) + len(self._removed), len(self.ids)))
        results = []
        for row_scores, row_positions in zip(scores, positions):
            pairs = [(self.ids[p], float(s)) for s, p in zip(row_scores, row_positions) if p >= 0 and p not in self._removed]
            results.append(rank_by_score(pairs)[: int(k)])
        return results

    def reconstruct(self, ids: Sequence[str]) -> np.ndarray:
        """The stored vectors of `ids` [len(ids), dim] float32: exact for flat, hnsw and ivf; for flat_fp16 and ivfpq
        its codes decoded, the vectors its own search scores with."""
        try:
            positions = np.fromiter((self._positions[i] for i in ids), dtype=np.int64, count=len(ids))
        except KeyError as exc:
            raise VectorIndexError(f"id {exc.args[0]!r} is not in the index") from None
        if self._index is None or not len(positions):
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.kind in TRAINED_KINDS:
            self._index.make_direct_map()  # a no-op once made: inverted lists cannot look up a position otherwise
        return self._index.reconstruct_batch(positions)

    # ------------------------------------------------------------- save/load
    def save(self, folder: str | Path) -> Path:
        faiss = import_faiss()
        if self._index is None:
            raise VectorIndexError("cannot save an empty index")
        if self._removed:
            raise VectorIndexError("cannot save an index holding removed vectors: compact it, or build it again")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(folder / INDEX_FILE))
        (folder / IDS_FILE).write_text(json.dumps(self.ids))
        meta = {"dim": self.dim, "kind": self.kind, "params": asdict(self.params), "stats": asdict(self.stats)}
        (folder / META_FILE).write_text(json.dumps(meta, indent=2))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "VectorIndex":
        faiss = import_faiss()
        folder = Path(folder)
        for name in (INDEX_FILE, IDS_FILE, META_FILE):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder} is not a saved VectorIndex: {name} is missing")
        meta = json.loads((folder / META_FILE).read_text())
        index = cls(meta["dim"], IndexParams(**meta["params"]))
        index.kind = meta["kind"]
        index._index = faiss.read_index(str(folder / INDEX_FILE))
        index.ids = json.loads((folder / IDS_FILE).read_text())
        if len(index.ids) != index._index.ntotal or index._index.d != index.dim:
            raise VectorIndexError(f"{folder}: {len(index.ids)} ids for {index._index.ntotal} vectors of dim {index._index.d}")
        index._positions = {i: n for n, i in enumerate(index.ids)}
        index.stats = IndexStats(**meta["stats"])
        if index.kind == "hnsw":
            index._index.hnsw.efSearch = index.params.ef_search
        elif index.kind in TRAINED_KINDS:
            index._index.nprobe = index.params.nprobe or index.stats.extra.get("nprobe", MIN_PROBES)
        return index

    @classmethod
    def build(cls, ids: Sequence[str], vectors: np.ndarray, kind: IndexKind = "flat", **params: Any) -> "VectorIndex":
        """Create, fill and measure an index in one call."""
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2:
            raise VectorIndexError(f"vectors must be a 2-d array, got shape {list(matrix.shape)}")
        index = cls(matrix.shape[1], kind=kind, **params)
        index.add(ids, matrix)
        return index
