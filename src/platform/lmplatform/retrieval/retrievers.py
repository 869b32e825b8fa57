"""Retrievers behind one interface: dense (Encoder + VectorIndex), BM25 (bm25s), hybrid (both fused), two-stage re-ranking;
and the served searches over a built index: `hybrid_search`, `metadata_search` (both ranked with the documents' metadata).

Every retriever is first given a corpus with `index(ids, texts)`, then answers
`search(queries, k, exclude=None) -> list[list[(id, score)]]`, best first, with
ties broken by id (`rank_by_score`). `exclude` removes ids per query (e.g. the
query's own report when queries are drawn from the corpus) before the top k is cut.
"""
from __future__ import annotations

import json
import logging
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from lmplatform.metrics.retrieval import rank_by_score
from lmplatform.retrieval.fusion import combine_rerank, fuse
from lmplatform.retrieval.index import IndexParams, VectorIndex
from lmplatform.retrieval.metadata_fusion import MetadataFusion, fusion_features
from lmplatform.retrieval.settings import FusionSettings

logger = logging.getLogger(__name__)

Hits = list[tuple[str, float]]
BM25_DIR = "bm25"  # the BM25 index inside an index folder, beside the FAISS files
BM25_META_FILE = "bm25_meta.json"


class Retriever(ABC):
    name: str = "retriever"

    @abstractmethod
    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Make the corpus searchable."""

    @abstractmethod
    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        """Top-k per query, best first."""

    def search(self, queries: Sequence[str], k: int, exclude: Optional[Sequence[set[str]]] = None) -> list[Hits]:
        queries = _check_search(queries, k, exclude)
        if not queries:
            return []
        extra = max((len(e) for e in exclude), default=0) if exclude is not None else 0
        results = self._search(queries, k + extra)
        if exclude is not None:
            results = [[hit for hit in hits if hit[0] not in drop] for hits, drop in zip(results, exclude)]
        return [hits[:k] for hits in results]


def _check_search(queries: Sequence[str], k: int, exclude: Optional[Sequence[set[str]]]) -> list[str]:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    queries = list(queries)
    if exclude is not None and len(exclude) != len(queries):
        raise ValueError(f"exclude has {len(exclude)} entries for {len(queries)} queries")
    return queries


def _check_corpus(ids: Sequence[str], texts: Sequence[str]) -> tuple[list[str], list[str]]:
    ids, texts = [str(i) for i in ids], list(texts)
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
    if not ids:
        raise ValueError("the corpus is empty")
    if len(set(ids)) != len(ids):
        raise ValueError("corpus ids are not unique")
    return ids, texts


class DenseRetriever(Retriever):
    """Bi-encoder retrieval: encode the corpus once into a VectorIndex, encode queries per call."""

    name = "dense"

    def __init__(self, encoder: Any, index_params: Optional[IndexParams] = None, batch_size: int = 64,
                 vector_index: Optional[VectorIndex] = None, show_progress: bool = False):
        self.encoder = encoder
        self.index_params = index_params or IndexParams()
        self.batch_size = batch_size
        self.vector_index = vector_index
        self.show_progress = show_progress
        self.encode_seconds = 0.0

    @classmethod
    def from_pretrained(cls, model: str | Path, quantize: Optional[str] = None, **kwargs: Any) -> "DenseRetriever":
        from lmplatform.models.encoder import Encoder

        return cls(Encoder.from_pretrained(model, quantize=quantize), **kwargs)

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        ids, texts = _check_corpus(ids, texts)
        start = time.perf_counter()
        vectors = self.encoder.encode(texts, batch_size=self.batch_size, show_progress=self.show_progress)
        self.encode_seconds += time.perf_counter() - start
        self.vector_index = VectorIndex(vectors.shape[1], self.index_params)
        self.vector_index.add(ids, vectors)

    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        if self.vector_index is None:
            raise ValueError("DenseRetriever has no index: call index(ids, texts) or pass vector_index")
        vectors = self.encoder.encode(queries, batch_size=self.batch_size)
        return self.vector_index.search(vectors, k)


class BM25Retriever(Retriever):
    """Okapi BM25 (Lucene variant) over lower-cased word tokens with English stop words removed.

    `save(folder)` writes bm25s' own files plus `bm25_meta.json` (ids and parameters); `load(folder)`
    reads them back (`build_index` saves one into `BM25_DIR` of every index folder).
    """

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, stopwords: Optional[str] = "en"):
        self.k1, self.b, self.stopwords = k1, b, stopwords
        self._model: Any = None
        self.ids: list[str] = []
        self._positions: dict[str, int] = {}

    def _tokens(self, texts: Sequence[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=self.stopwords, return_ids=False, show_progress=False)

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        import bm25s

        ids, texts = _check_corpus(ids, texts)
        self._model = bm25s.BM25(k1=self.k1, b=self.b)
        self._model.index(self._tokens(texts), show_progress=False)
        self._set_ids(ids)

    def _set_ids(self, ids: list[str]) -> None:
        self.ids = ids
        self._positions = {doc: n for n, doc in enumerate(ids)}

    def query_scores(self, queries: Sequence[str]) -> list[np.ndarray]:
        """Per query, the BM25 score of every document [len(ids)], in `ids` order; 0 where no query term occurs."""
        if self._model is None:
            raise ValueError("BM25Retriever has no index: call index(ids, texts) or load(folder) first")
        vocab = self._model.vocab_dict
        out = []
        for tokens in self._tokens(queries):
            known = [t for t in tokens if t in vocab]
            out.append(self._model.get_scores(known) if known else np.zeros(len(self.ids), dtype=np.float32))
        return out

    def positions(self, ids: Sequence[str]) -> np.ndarray:
        """Positions of `ids` in `ids` order (index into a `query_scores` row)."""
        return np.fromiter((self._positions[i] for i in ids), dtype=np.int64, count=len(ids))

    def top_hits(self, scores: np.ndarray, k: int) -> Hits:
        """The k best documents of one `query_scores` row; a score of 0 (no query term) is not a match."""
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        return rank_by_score((self.ids[i], float(scores[i])) for i in top if scores[i] > 0)

    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        return [self.top_hits(scores, k) for scores in self.query_scores(queries)]

    def save(self, folder: str | Path) -> Path:
        if self._model is None:
            raise ValueError("BM25Retriever has no index to save")
        folder = Path(folder)
        self._model.save(str(folder), show_progress=False)
        meta = {"ids": self.ids, "k1": self.k1, "b": self.b, "stopwords": self.stopwords}
        (folder / BM25_META_FILE).write_text(json.dumps(meta))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "BM25Retriever":
        import bm25s

        folder = Path(folder)
        if not (folder / BM25_META_FILE).is_file():
            raise FileNotFoundError(f"{folder} is not a saved BM25 index: {BM25_META_FILE} is missing")
        meta = json.loads((folder / BM25_META_FILE).read_text())
        retriever = cls(meta["k1"], meta["b"], meta["stopwords"])
        retriever._model = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
        retriever._set_ids(meta["ids"])
        if retriever._model.scores["num_docs"] != len(retriever.ids):
            raise ValueError(f"{folder}: {len(retriever.ids)} ids for {retriever._model.scores['num_docs']} BM25 documents")
        return retriever


def first_stage_hits(vector_index: VectorIndex, bm25: BM25Retriever, query_vectors: np.ndarray, query_texts: Sequence[str],
                     depth: int, exclude: Optional[Sequence[set[str]]] = None, admit: Optional[Callable[[str], bool]] = None,
                     ) -> Iterator[tuple[np.ndarray, np.ndarray, Hits, Hits]]:
    """Per query, what a fused search starts from: (its vector, its BM25 row over every document, the dense top `depth`,
    BM25's top `depth`), both after `exclude` and among the documents `admit` keeps (None: all), so a document left
    out takes no place in the pool."""
    drops = list(exclude) if exclude is not None else [set()] * len(query_texts)
    if admit is None:
        extra = max((len(d) for d in drops), default=0)
        dense_lists = vector_index.search(query_vectors, depth + extra)
        for vector, bm25_row, dense_hits, drop in zip(query_vectors, bm25.query_scores(query_texts), dense_lists, drops):
            yield (vector, bm25_row, [hit for hit in dense_hits if hit[0] not in drop][:depth],
                   [hit for hit in bm25.top_hits(bm25_row, depth + len(drop)) if hit[0] not in drop][:depth])
        return
    for vector, bm25_row, drop in zip(query_vectors, bm25.query_scores(query_texts), drops):
        def kept(doc_id: str, drop: set[str] = drop) -> bool:
            return doc_id not in drop and admit(doc_id)

        yield (vector, bm25_row, admitted_dense_hits(vector_index, vector, depth, kept),
               admitted_hits(lambda width, row=bm25_row: bm25.top_hits(row, width), depth, kept, len(bm25_row)))


def admitted_dense_hits(vector_index: VectorIndex, vector: np.ndarray, depth: int, admit: Callable[[str], bool]) -> Hits:
    """The dense top `depth` of one query vector [dim] among the documents `admit` keeps (`admitted_hits`)."""
    return admitted_hits(lambda width: vector_index.search(vector[None], width)[0], depth, admit, len(vector_index))


def admitted_hits(search: Callable[[int], Hits], depth: int, admit: Callable[[str], bool], size: int) -> Hits:
    """The best `depth` hits that `admit` keeps: `search(width)` (the best `width` of `size` documents, best first)
    is asked again 4× deeper while it keeps fewer and has more to give, so a filter that keeps few documents costs
    searches in proportion to how few, and a window that keeps many costs one."""
    width = depth
    while True:
        hits = search(min(width, size))
        kept = [hit for hit in hits if admit(hit[0])]
        if len(kept) >= depth or len(hits) < min(width, size) or width >= size:
            return kept[:depth]
        width *= 4


def hybrid_search(vector_index: VectorIndex, bm25: BM25Retriever, query_vectors: np.ndarray, query_texts: Sequence[str],
                  k: int, settings: FusionSettings, exclude: Optional[Sequence[set[str]]] = None,
                  admit: Optional[Callable[[str], bool]] = None) -> list[Hits]:
    """BM25 fused with dense search (`retrieval.fusion.fuse`), the top k per query.

    query_vectors: [q, dim] normalised, for query_texts [q]. Each retriever contributes its top
    max(k, settings.hybrid_candidates) after `exclude` and `admit` are applied (`first_stage_hits`), so a document left
    out takes no place in the pool nor in its normalisation. Exact scores of the pool: inner products with the stored vectors
    (`VectorIndex.reconstruct`) and the query's BM25 row.
    """
    out = []
    for vector, bm25_row, dense_hits, bm25_hits in first_stage_hits(
            vector_index, bm25, query_vectors, query_texts, max(k, settings.hybrid_candidates), exclude, admit):

        def exact(pool: list[str], vector: np.ndarray = vector, bm25_row: np.ndarray = bm25_row) -> tuple[np.ndarray, np.ndarray]:
            return vector_index.reconstruct(pool) @ vector, bm25_row[bm25.positions(pool)]

        out.append(fuse(dense_hits, bm25_hits, exact, settings)[:k])
    return out


def metadata_search(vector_index: VectorIndex, bm25: BM25Retriever, document_metadata: Callable[[str], Mapping[str, Any]],
                    query_vectors: np.ndarray, query_texts: Sequence[str], query_metadata: Sequence[Mapping[str, Any]],
                    k: int, fusion: MetadataFusion, exclude: Optional[Sequence[set[str]]] = None,
                    admit: Optional[Callable[[str], bool]] = None) -> list[Hits]:
    """Each query's pool ranked by a fitted metadata fusion (`retrieval.metadata_fusion`), the top k per query.

    The pool is `candidate_pool`'s: the dense top `fusion.config.pool` and BM25's (documents sharing a term with the
    query) after `exclude` and `admit` (`first_stage_hits`); each member gets its exact cosine (`VectorIndex.reconstruct`), its
    BM25 score and its metadata (`document_metadata(id)`), and is scored w · features + b. query_vectors: [q, dim]
    normalised, for query_texts [q] with query_metadata [q]. A hit's score is the fusion's logit.
    """
    out = []
    firsts = first_stage_hits(vector_index, bm25, query_vectors, query_texts, fusion.config.pool, exclude, admit)
    for (vector, bm25_row, dense_hits, bm25_hits), metadata in zip(firsts, query_metadata):
        pool = sorted({doc for doc, _ in dense_hits} | {doc for doc, _ in bm25_hits})
        if not pool:
            out.append([])
            continue
        features = fusion_features(vector_index.reconstruct(pool) @ vector, bm25_row[bm25.positions(pool)], metadata,
                                   [document_metadata(doc) for doc in pool], fusion.config)
        out.append(rank_by_score(zip(pool, fusion.score(features).tolist()))[:k])
    return out


class HybridRetriever(Retriever):
    """BM25 fused with a dense retriever, per `FusionSettings` (convex mix of min-max scores, or RRF)."""

    name = "hybrid"

    def __init__(self, dense: DenseRetriever, bm25: Optional[BM25Retriever] = None, settings: Optional[FusionSettings] = None):
        self.dense, self.bm25 = dense, bm25 or BM25Retriever()
        self.settings = settings or FusionSettings()
        self._encoded: tuple[list[str], np.ndarray] = ([], np.zeros((0, 0), dtype=np.float32))

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        ids, texts = _check_corpus(ids, texts)
        self.dense.index(ids, texts)
        self.bm25.index(ids, texts)

    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        return self.search(queries, k)

    def search(self, queries: Sequence[str], k: int, exclude: Optional[Sequence[set[str]]] = None) -> list[Hits]:
        queries = _check_search(queries, k, exclude)
        if not queries:
            return []
        if self.dense.vector_index is None:
            raise ValueError("HybridRetriever has no index: call index(ids, texts)")
        if self._encoded[0] != queries:  # a sweep over settings searches the same queries again: encode them once
            self._encoded = (queries, self.dense.encoder.encode(queries, batch_size=self.dense.batch_size))
        return hybrid_search(self.dense.vector_index, self.bm25, self._encoded[1], queries, k, self.settings, exclude)


def rerank(reranker: Any, query: str, candidates: Sequence[tuple[str, str]], batch_size: int = 32) -> Hits:
    """Re-order (id, text) candidates for one query by cross-encoder score; the candidate set is unchanged."""
    if not candidates:
        return []
    scores = reranker.rerank(query, [text for _, text in candidates], batch_size=batch_size)
    return rank_by_score((doc_id, float(s)) for (doc_id, _), s in zip(candidates, scores))


class TwoStageRetriever(Retriever):
    """First-stage retriever's top-N re-ranked by a cross-encoder (the trouble-report study's pipeline).

    `search(k)` returns the N re-ranked candidates, then (if k > N) the first
    stage's ranks N+1..k unchanged, so recall beyond N equals the first stage's.
    Re-ranked hits are scored (1-v)·minmax(first stage) + v·minmax(cross-encoder) with
    v = rerank_weight (`fusion.combine_rerank`; v = 1: the cross-encoder's order); appended hits
    keep first-stage scores.
    """

    name = "two_stage"

    def __init__(self, first_stage: Retriever, reranker: Any, candidates: int = 20, batch_size: int = 32,
                 rerank_weight: float = 1.0):
        if candidates <= 0:
            raise ValueError(f"candidates must be positive, got {candidates}")
        if not 0.0 <= rerank_weight <= 1.0:
            raise ValueError(f"rerank_weight must be in [0, 1], got {rerank_weight}")
        self.first_stage, self.reranker = first_stage, reranker
        self.candidates, self.batch_size, self.rerank_weight = candidates, batch_size, rerank_weight
        self.texts: dict[str, str] = {}

    @classmethod
    def from_pretrained(cls, first_stage: Retriever, reranker_path: str | Path, candidates: int = 20,
                        max_seq_length: int = 256) -> "TwoStageRetriever":
        from lmplatform.models.cross_encoder import CrossEncoder

        return cls(first_stage, CrossEncoder.from_pretrained(reranker_path, max_seq_length=max_seq_length), candidates)

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        ids, texts = _check_corpus(ids, texts)
        self.first_stage.index(ids, texts)
        self.texts = dict(zip(ids, texts))

    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        first = self.first_stage._search(queries, max(k, self.candidates))
        return self.rerank_lists(queries, first, k)

    def search(self, queries: Sequence[str], k: int, exclude: Optional[Sequence[set[str]]] = None) -> list[Hits]:
        # Exclusion must happen before the top-N is re-ranked, or excluded ids would take candidate slots.
        if exclude is None:
            return super().search(queries, k)
        first = self.first_stage.search(queries, max(k, self.candidates), exclude=exclude)
        return self.rerank_lists(list(queries), first, k)

    def rerank_lists(self, queries: Sequence[str], first: Sequence[Hits], k: int) -> list[Hits]:
        """Re-rank the top-N of given candidate lists (one per query)."""
        tops = [hits[: self.candidates] for hits in first]
        pairs_q = [query for query, top in zip(queries, tops) for _ in top]
        pairs_d = [self.texts[doc_id] for top in tops for doc_id, _ in top]
        scores = np.asarray(self.reranker.score(pairs_q, pairs_d, batch_size=self.batch_size) if pairs_q else [])
        out, start = [], 0
        for hits, top in zip(first, tops):
            out.append(combine_rerank(hits, scores[start : start + len(top)], self.rerank_weight)[:k])
            start += len(top)
        return out
