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

Layout, for a tracker's 10^5-10^6 reports: every posting is held twice, as an int32 term or position and a float32
frequency, 16 bytes in all, where Python lists and a Counter per document took several times that.
- **Rows** (document -> its terms, what `remove` takes back from df): scipy CSR blocks, one per `add` (stacked
  into one past MAX_ROW_BLOCKS).
- **Columns** (term -> its documents, what a query reads): the *base*, one CSC matrix of every document up to the
  last fold, plus the *tail*, per-term lists of the postings added since. When the tail outgrows a
  sixteenth of the base, `add` folds it in (one sparse transpose, dropping removed documents' postings), so an
  upsert costs its own postings and a query a slice per term.
"""
from __future__ import annotations

import bisect
from collections import Counter
from typing import Optional, Sequence

import numpy as np
import scipy.sparse as sp

from lmplatform.retrieval.retrievers import BM25Retriever, _check_corpus

TOKENIZE_CHUNK = 2_000  # texts tokenized at once: bm25s's token lists of a whole corpus would dwarf the index
# The tail folds into the base when its postings pass both of these: a fold transposes every posting held.
MIN_TAIL_POSTINGS = 65_536
TAIL_SHARE_OF_BASE = 1 / 16
MAX_ROW_BLOCKS = 64  # the row blocks added since the last fold are stacked into one past this


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
        self._vocabulary: dict[str, int] = {}  # term -> term id (a column)
        self._df = np.zeros(0, dtype=np.int64)  # per term id: documents held that contain it
        self._lengths = np.zeros(0, dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._total_length = 0.0
        self._row_blocks: list[sp.csr_matrix] = []  # the rows, in position order
        self._block_starts: list[int] = []  # first position of each row block
        self._base = sp.csc_matrix((0, 0), dtype=np.float32)  # positions [0, _base_rows) by term
        self._tail: dict[int, tuple[list[int], list[float]]] = {}  # term id -> (positions, frequencies) after the base
        self._tail_arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # the tail's lists as arrays, made on first use
        self._tail_postings = 0
        self._norms, self._norms_key = np.zeros(0, dtype=np.float32), (0, 0.0)
        self.folds = 0  # tails folded into the base (`add` takes longer then: one transpose of every posting)

    def index(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        ids, texts = _check_corpus(ids, texts)
        self._reset()
        self.add(ids, texts)

    def __len__(self) -> int:
        return len(self._positions)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._positions

    @property
    def postings(self) -> int:
        """Postings held (base and tail), removed documents' included until the next fold."""
        return int(self._base.nnz) + self._tail_postings

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index new documents; an id already held is replaced (removed, then added at a new position)."""
        ids, texts = [str(i) for i in ids], list(texts)
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        if len(set(ids)) != len(ids):
            raise ValueError("ids within one add are not unique")
        if not ids:
            return
        self.remove([i for i in ids if i in self._positions])
        start = len(self.ids)
        block, lengths = self._rows(texts)
        self._df = np.concatenate([self._df, np.zeros(len(self._vocabulary) - len(self._df), dtype=np.int64)])
        self._df += np.bincount(block.indices, minlength=len(self._vocabulary))
        self._row_blocks.append(block)
        self._block_starts.append(start)
        if len(self._row_blocks) > MAX_ROW_BLOCKS:  # one-document upserts would leave a scipy matrix each
            self._row_blocks[1:] = [self._stacked(self._row_blocks[1:])]
            self._block_starts[1:] = self._block_starts[1:2]
        self._lengths = np.concatenate([self._lengths, lengths])
        self._alive = np.concatenate([self._alive, np.ones(len(ids), dtype=bool)])
        self._total_length += float(lengths.sum(dtype=np.float64))
        self.ids.extend(ids)
        self._positions.update((doc_id, start + n) for n, doc_id in enumerate(ids))
        self._tail_postings += int(block.nnz)
        if self._tail_postings > max(MIN_TAIL_POSTINGS, self._base.nnz * TAIL_SHARE_OF_BASE):
            self.fold()
        else:
            self._extend_tail(block, start)
        self._model = self  # BM25Retriever's "indexed" marker

    def _rows(self, texts: list[str]) -> tuple[sp.csr_matrix, np.ndarray]:
        """The texts as CSR rows over the vocabulary (new terms get ids), and their token counts."""
        vocabulary = self._vocabulary
        terms, frequencies, counts_per_row = [], [], []
        lengths = np.zeros(len(texts), dtype=np.float32)
        for chunk in range(0, len(texts), TOKENIZE_CHUNK):
            chunk_terms: list[int] = []
            chunk_frequencies: list[int] = []
            for offset, tokens in enumerate(self._tokens(texts[chunk:chunk + TOKENIZE_CHUNK])):
                counts = Counter(tokens)
                chunk_terms.extend(vocabulary.setdefault(term, len(vocabulary)) for term in counts)
                chunk_frequencies.extend(counts.values())
                counts_per_row.append(len(counts))
                lengths[chunk + offset] = len(tokens)
            terms.append(np.asarray(chunk_terms, dtype=np.int32))
            frequencies.append(np.asarray(chunk_frequencies, dtype=np.float32))
        pointers = np.concatenate([[0], np.cumsum(counts_per_row, dtype=np.int64)])
        block = sp.csr_matrix((np.concatenate(frequencies), np.concatenate(terms), pointers),
                              shape=(len(texts), len(vocabulary)))
        return block, lengths

    def _extend_tail(self, block: sp.csr_matrix, start: int) -> None:
        rows = np.repeat(np.arange(start, start + block.shape[0]), np.diff(block.indptr))
        for term, position, frequency in zip(block.indices.tolist(), rows.tolist(), block.data.tolist()):
            positions, frequencies = self._tail.setdefault(term, ([], []))
            positions.append(position)
            frequencies.append(frequency)
            self._tail_arrays.pop(term, None)

    def fold(self) -> None:
        """Fold the tail into the base now: every row block into one, removed documents' postings dropped, and the
        base made again from it (`add` does this when the tail outgrows its share)."""
        if not self._row_blocks:
            return
        rows = self._stacked(self._row_blocks)
        rows.data[~np.repeat(self._alive, np.diff(rows.indptr))] = 0
        rows.eliminate_zeros()
        rows.indices = rows.indices.astype(np.int32, copy=False)
        self._row_blocks, self._block_starts = [rows], [0]
        self._base = rows.tocsc()
        self._tail, self._tail_arrays, self._tail_postings = {}, {}, 0
        self.folds += 1

    def _stacked(self, blocks: list[sp.csr_matrix]) -> sp.csr_matrix:
        """Row blocks as one CSR matrix over the whole vocabulary (an earlier block knows fewer terms)."""
        for block in blocks:
            block.resize(block.shape[0], len(self._vocabulary))
        return sp.vstack(blocks, format="csr", dtype=np.float32)

    def remove(self, ids: Sequence[str]) -> None:
        """Forget documents (ids not held are ignored): they leave N, df and the mean length, and score 0."""
        for doc_id in ids:
            position = self._positions.pop(str(doc_id), None)
            if position is None:
                continue
            n = bisect.bisect_right(self._block_starts, position) - 1
            block, row = self._row_blocks[n], position - self._block_starts[n]
            self._df[block.indices[block.indptr[row]:block.indptr[row + 1]]] -= 1
            self._alive[position] = False
            self._total_length -= float(self._lengths[position])

    def query_scores(self, queries: Sequence[str]) -> list[np.ndarray]:
        """Per query, the BM25 score of every position [len(ids)] (removed ones 0), as bm25s computes it."""
        if self._model is None:
            raise ValueError("IncrementalBM25 has no documents: call index(ids, texts) or add(ids, texts) first")
        count = len(self._positions)
        norm = self._length_norms()
        out = []
        for tokens in self._tokens(queries):
            scores = np.zeros(len(self.ids), dtype=np.float32)  # float32, as bm25s scores
            # A term's postings are scored once and weighted by its count in the query: a 100,000-character report
            # repeats its terms thousands of times, and scoring each occurrence made such a query 5x slower.
            for token, query_tf in Counter(tokens).items():
                term = self._vocabulary.get(token)
                if term is None or self._df[term] <= 0:
                    continue
                df = self._df[term]
                weight = np.float32(query_tf * np.log(1.0 + (count - df + 0.5) / (df + 0.5)))
                for positions, frequencies in self._postings_of(term):
                    # weight * tf / (tf + norm), in one buffer: a common term's postings are a large share of a
                    # query's time, and every temporary is another pass over them
                    term_scores = norm[positions]
                    term_scores += frequencies
                    np.divide(frequencies, term_scores, out=term_scores)
                    term_scores *= weight
                    scores[positions] += term_scores
            scores *= self._alive  # removed documents keep their postings until the next fold
            out.append(scores)
        return out

    def _length_norms(self) -> np.ndarray:
        """k1 · (1 - b + b · |d| / avgdl) per position, made again when a change moved avgdl."""
        count = len(self._positions)
        mean_length = self._total_length / count if count else 0.0
        key = (len(self.ids), mean_length)
        if self._norms_key != key:
            self._norms = (np.float32(self.k1 * (1.0 - self.b))
                           + np.float32(self.k1 * self.b / (mean_length or 1.0)) * self._lengths).astype(np.float32)
            self._norms_key = key
        return self._norms

    def _postings_of(self, term: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(positions, frequencies) of a term in the base and in the tail."""
        found = []
        if term < self._base.shape[1]:
            low, high = self._base.indptr[term], self._base.indptr[term + 1]
            if high > low:
                # one cast to intp here, where each of the gathers and the scatter would cast int32 again
                found.append((self._base.indices[low:high].astype(np.intp), self._base.data[low:high]))
        if term in self._tail:
            if term not in self._tail_arrays:
                positions, frequencies = self._tail[term]
                self._tail_arrays[term] = (np.asarray(positions, dtype=np.int64),
                                           np.asarray(frequencies, dtype=np.float32))
            found.append(self._tail_arrays[term])
        return found

    def save(self, folder):  # type: ignore[no-untyped-def]
        raise NotImplementedError("IncrementalBM25 is rebuilt from its documents' texts; save a BM25Retriever instead")
