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

For the other kinds, `add` measures recall@10 against exact search on a sample
of the added vectors used as queries, logs it and stores it in `stats`.

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
    nprobe: int = 16
    pq_m: int = 48  # sub-quantizers for ivfpq; must divide dim
    recall_sample: int = 200  # queries used to measure recall@10 against exact search

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise VectorIndexError(f"index kind {self.kind!r} is not supported; allowed: {', '.join(INDEX_KINDS)}")
        for name in ("hnsw_m", "ef_construction", "ef_search", "nprobe", "pq_m"):
            if getattr(self, name) <= 0:
                raise VectorIndexError(f"index parameter {name} must be positive, got {getattr(self, name)}")


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


def auto_kind(count: int) -> str:
    if count <= AUTO_FLAT_MAX:
        return "flat"
    if count <= AUTO_HNSW_MAX:
        return "hnsw"
    return "ivfpq"


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
    def _create(self, sample: np.ndarray) -> None:
        faiss = import_faiss()
        n = len(sample)
        if not self.kind:
            self.kind = auto_kind(n)
            logger.info("index kind auto-selected: %s for %d vectors", self.kind, n)
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
            nlist = p.nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))
            if n < nlist:
                raise VectorIndexError(f"{self.kind} needs at least nlist={nlist} vectors in its first add to train, got {n}")
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
            self._index.nprobe = p.nprobe
            self.stats.extra["nlist"] = nlist
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
            self._create(matrix)
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
        """Size of the serialized FAISS index (what it occupies in RAM, within a few %)."""
        faiss = import_faiss()
        if self._index is None:
            return 0
        if self.kind in EXHAUSTIVE_KINDS:  # skip copying gigabytes just to count them
            return int(self._index.ntotal) * self.dim * BYTES_PER_COMPONENT[self.kind]
        return int(faiss.serialize_index(self._index).size)

    def measure_recall(self, vectors: np.ndarray, k: int = 10) -> float:
        """Recall@k against exact search when the index holds exactly `vectors` (in order).

        Sampled rows of `vectors` are the queries; the exact top-k over `vectors`
        is the truth. `add` calls this on the first add, i.e. when the index is built.
        """
        if self._index is None or self._index.ntotal != len(vectors):
            raise VectorIndexError("measure_recall needs the exact set of vectors the index holds")
        rng = np.random.default_rng(0)
        n = min(self.params.recall_sample, len(vectors))
        queries = np.ascontiguousarray(vectors[rng.choice(len(vectors), size=n, replace=False)])
        k = min(k, len(vectors))
        _, truth = exact_search(queries, vectors, k)
        _, found = self._index.search(queries, k)
        recall = sum(len(set(t) & set(f)) for t, f in zip(truth, found)) / (n * k)
        self.stats.recall_at_10 = round(recall, 4)
        self.stats.recall_queries = n
        logger.info("%s index: recall@%d vs exact = %.4f over %d queries", self.kind, k, recall, n)
        print(f"[VectorIndex] {self.kind}: recall@{k} vs exact search = {recall:.4f} ({n} sampled queries)")
        return recall

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
        if self.kind in ("ivf", "ivfpq"):
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
        elif index.kind in ("ivf", "ivfpq"):
            index._index.nprobe = index.params.nprobe
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
