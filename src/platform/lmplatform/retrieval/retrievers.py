"""Retrievers behind one interface: dense (Encoder + VectorIndex), BM25 (bm25s), and two-stage re-ranking.

Every retriever is first given a corpus with `index(ids, texts)`, then answers
`search(queries, k, exclude=None) -> list[list[(id, score)]]`, best first, with
ties broken by id (`rank_by_score`). `exclude` removes ids per query (e.g. the
query's own report when queries are drawn from the corpus) before the top k is cut.
"""
from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.evaluation.metrics.retrieval import rank_by_score
from lmplatform.retrieval.index import IndexParams, VectorIndex

logger = logging.getLogger(__name__)

Hits = list[tuple[str, float]]


class Retriever(ABC):
    name: str = "retriever"

    @abstractmethod
    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Make the corpus searchable."""

    @abstractmethod
    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        """Top-k per query, best first."""

    def search(self, queries: Sequence[str], k: int, exclude: Optional[Sequence[set[str]]] = None) -> list[Hits]:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        queries = list(queries)
        if exclude is not None and len(exclude) != len(queries):
            raise ValueError(f"exclude has {len(exclude)} entries for {len(queries)} queries")
        if not queries:
            return []
        extra = max((len(e) for e in exclude), default=0) if exclude is not None else 0
        results = self._search(queries, k + extra)
        if exclude is not None:
            results = [[hit for hit in hits if hit[0] not in drop] for hits, drop in zip(results, exclude)]
        return [hits[:k] for hits in results]


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
    """Okapi BM25 (Lucene variant) over lower-cased word tokens with English stop words removed."""

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, stopwords: Optional[str] = "en"):
        self.k1, self.b, self.stopwords = k1, b, stopwords
        self._model: Any = None
        self.ids: list[str] = []

    def _tokens(self, texts: Sequence[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=self.stopwords, return_ids=False, show_progress=False)

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        import bm25s

        self.ids, texts = _check_corpus(ids, texts)
        self._model = bm25s.BM25(k1=self.k1, b=self.b)
        self._model.index(self._tokens(texts), show_progress=False)

    def _search(self, queries: Sequence[str], k: int) -> list[Hits]:
        if self._model is None:
            raise ValueError("BM25Retriever has no index: call index(ids, texts) first")
        vocab = self._model.vocab_dict
        k = min(k, len(self.ids))
        results: list[Hits] = []
        for tokens in self._tokens(queries):
            known = [t for t in tokens if t in vocab]
            if not known:  # no query word occurs in the corpus: nothing matches
                results.append([])
                continue
            scores = self._model.get_scores(known)
            top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
            # Zero score means no query term occurs in the document: not a match.
            results.append(rank_by_score((self.ids[i], float(scores[i])) for i in top if scores[i] > 0))
        return results


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
    Scores of re-ranked hits are cross-encoder probabilities; appended hits keep
    first-stage scores.
    """

    name = "two_stage"

    def __init__(self, first_stage: Retriever, reranker: Any, candidates: int = 20, batch_size: int = 32):
        if candidates <= 0:
            raise ValueError(f"candidates must be positive, got {candidates}")
        self.first_stage, self.reranker = first_stage, reranker
        self.candidates, self.batch_size = candidates, batch_size
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
        pairs_q, pairs_d, owners = [], [], []
        for row, (query, hits) in enumerate(zip(queries, first)):
            for doc_id, _ in hits[: self.candidates]:
                pairs_q.append(query)
                pairs_d.append(self.texts[doc_id])
                owners.append((row, doc_id))
        scores = self.reranker.score(pairs_q, pairs_d, batch_size=self.batch_size) if pairs_q else []
        reranked: list[list[tuple[str, float]]] = [[] for _ in queries]
        for (row, doc_id), score in zip(owners, scores):
            reranked[row].append((doc_id, float(score)))
        return [(rank_by_score(top) + list(hits[self.candidates :]))[:k] for top, hits in zip(reranked, first)]
