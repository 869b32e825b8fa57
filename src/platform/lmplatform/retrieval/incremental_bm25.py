"""`IncrementalBM25`: BM25 over a corpus that changes, exact after every addition and removal.

bm25s (behind `BM25Retriever`) precomputes each (document, term) score with the corpus statistics of the moment
it indexes: the document count N, each term's document frequency df and the mean document length. A document
added or removed changes all three, so every stored score, and bm25s cannot add a document at all. This index
keeps what the scores are made of instead, per term the postings (document position, term frequency), and the
document lengths, and computes the scores at query time with the statistics of the documents held now.

Scores are bm25s's own ("lucene" variant, its tokenizer and stop words), so after any sequence of `add` and
`remove` they equal those of bm25s indexing the documents held, from scratch:

    score(q, d) = Σ_{t ∈ q} idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with the query's tokens counted as often as they occur. A removed document keeps its position (positions are
what `hybrid_search` addresses scores by) and scores 0, which `top_hits` never returns.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import numpy as np

from lmplatform.retrieval.retrievers import BM25Retriever, _check_corpus


class IncrementalBM25(BM25Retriever):
    """`BM25Retriever`'s interface (`index`, `search`, `query_scores`, `top_hits`, `positions`, `ids`) plus
    `add` and `remove`. Cost: a query scores every posting of its terms (bm25s: sums precomputed scores)."""

    name = "bm25-incremental"

    def __init__(self, k1: float = 1.5, b: float = 0.75, stopwords: Optional[str] = "en"):
        super().__init__(k1, b, stopwords)
        self._reset()

    def _reset(self) -> None:
        self._model = None
        self.ids, self._positions = [], {}
        self._postings: dict[str, tuple[list[int], list[int]]] = {}  # term -> (positions, term frequencies)
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # the postings as arrays, made on first use
        self._terms: list[Counter] = []  # per position: its tokens, counted (what `remove` takes back)
        self._lengths = np.zeros(0, dtype=np.float64)
        self._alive = np.zeros(0, dtype=bool)
        self._df: Counter = Counter()
        self._total_length = 0.0

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        ids, texts = _check_corpus(ids, texts)
        self._reset()
        self.add(ids, texts)

    def __len__(self) -> int:
        return len(self._positions)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._positions

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index new documents; an id already held is replaced (removed, then added at a new position)."""
        ids, texts = [str(i) for i in ids], list(texts)
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        if len(set(ids)) != len(ids):
            raise ValueError("ids within one add are not unique")
        self.remove([i for i in ids if i in self._positions])
        start = len(self.ids)
        lengths = np.zeros(len(ids), dtype=np.float64)
        for offset, (doc_id, tokens) in enumerate(zip(ids, self._tokens(texts))):
            position = start + offset
            counts = Counter(tokens)
            for term, tf in counts.items():
                positions, frequencies = self._postings.setdefault(term, ([], []))
                positions.append(position)
                frequencies.append(tf)
                self._arrays.pop(term, None)
            self._df.update(counts.keys())
            self._terms.append(counts)
            lengths[offset] = len(tokens)
            self.ids.append(doc_id)
            self._positions[doc_id] = position
        self._lengths = np.concatenate([self._lengths, lengths])
        self._alive = np.concatenate([self._alive, np.ones(len(ids), dtype=bool)])
        self._total_length += float(lengths.sum())
        self._model = self  # BM25Retriever's "indexed" marker

    def remove(self, ids: Sequence[str]) -> None:
        """Forget documents (ids not held are ignored): they leave N, df and the mean length, and score 0."""
        for doc_id in ids:
            position = self._positions.pop(str(doc_id), None)
            if position is None:
                continue
            counts = self._terms[position]
            self._df.subtract(counts.keys())
            self._alive[position] = False
            self._total_length -= float(self._lengths[position])
            self._terms[position] = Counter()

    def query_scores(self, queries: Sequence[str]) -> list[np.ndarray]:
        """Per query, the BM25 score of every position [len(ids)] (removed ones 0), as bm25s computes it."""
        if self._model is None:
            raise ValueError("IncrementalBM25 has no documents: call index(ids, texts) or add(ids, texts) first")
        count = len(self._positions)
        mean_length = self._total_length / count if count else 0.0
        out = []
        for tokens in self._tokens(queries):
            scores = np.zeros(len(self.ids), dtype=np.float64)
            # A term's postings are scored once and weighted by its count in the query: a 100,000-character report
            # repeats its terms thousands of times, and scoring each occurrence made such a query 5x slower.
            for term, query_tf in Counter(tokens).items():
                df = self._df.get(term, 0)
                if df <= 0:
                    continue
                positions, frequencies = self._posting_arrays(term)
                idf = np.log(1.0 + (count - df + 0.5) / (df + 0.5))
                norm = self.k1 * ((1.0 - self.b) + self.b * self._lengths[positions] / mean_length)
                scores[positions] += query_tf * idf * frequencies / (norm + frequencies) * self._alive[positions]
            out.append(scores.astype(np.float32))
        return out

    def _posting_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        if term not in self._arrays:
            positions, frequencies = self._postings[term]
            self._arrays[term] = (np.asarray(positions, dtype=np.int64), np.asarray(frequencies, dtype=np.float64))
        return self._arrays[term]

    def save(self, folder):  # type: ignore[no-untyped-def]
        raise NotImplementedError("IncrementalBM25 is rebuilt from its documents' texts; save a BM25Retriever instead")
