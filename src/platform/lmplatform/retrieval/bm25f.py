"""BM25F and BM25F_ext over bug reports with fields: the textual half of the field's classical peers (REP, Sun et al.).

Duplicate-detection papers compare against BM25F (Robertson et al. 2004) and REP's BM25F_ext (Sun, Lo, Khoo, Jiang,
ASE 2011), not against one-field BM25: a report's summary and description weigh differently, and their lengths are
normalised apart. This module is a self-contained implementation of both (its own tokeniser, nothing from bm25s),
so a bench can run the peers on our data in the field's protocol (notes/duplicate-detection-protocol.md).

For a query report q and a document d over fields f (n-grams t of one order, unigrams or bigrams):

    TF_D(d, t)  = Σ_f w_f · occurrences(d[f], t) / (1 − b_f + b_f · length_f(d) / average_length_f)
    TF_Q(q, t)  = Σ_f w_f · occurrences(q[f], t)                   (query fields weighted, not length-normalised)
    IDF(t)      = log(N / df(t))                                   (df: documents with t in any field)
    BM25F(q, d)     = Σ_{t ∈ q ∩ d} IDF(t) · TF_D(d, t) / (k1 + TF_D(d, t))           (each query term once)
    BM25F_ext(q, d) = Σ_{t ∈ q ∩ d} IDF(t) · TF_D(d, t) / (k1 + TF_D(d, t)) · (k3 + 1) · TF_Q(q, t) / (k3 + TF_Q(q, t))

length_f(d) counts the field's n-grams of the index's order; average_length_f is its mean over the indexed documents
(an empty field everywhere has ratio 0). The free parameters are w_f, b_f per field, k1, and k3 for BM25F_ext
(`BM25FParams`). The formula functions below use arithmetic only, so they take numpy arrays and torch tensors alike:
REP's training (`retrieval.rep`) differentiates the very same expressions.

`BM25FIndex` keeps one scipy.sparse term-count matrix per field [documents, vocabulary] (columns stored, CSC) over a
shared vocabulary; scoring a query touches only the postings of its terms, so ranking one report against 100,000 is a
few sparse column slices and one sparse matrix-vector product (milliseconds), with the length normalisation applied at
query time so every parameter can change without re-indexing. `tune_bm25f` tunes the parameters on dev by coordinate
search against any scoring callback.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import sparse

DEFAULT_WEIGHT = 1.0  # w_f of a field the parameters do not name
DEFAULT_B = 0.75  # b_f of a field the parameters do not name
TINY = 1e-12  # keeps x / (k + x) finite (and 0) where x = k = 0; changes no other value measurably

_WORD = re.compile(r"[^\W_]+")  # a run of letters and digits (any script); everything else separates


def tokenize(text: Any) -> list[str]:
    """Lower-cased runs of letters and digits; anything else (punctuation, space, underscore) separates.
    None is the empty text, any other non-string its `str`."""
    if text is None:
        return []
    return _WORD.findall(str(text).lower())


def ngrams(tokens: Sequence[str], order: int) -> list[str]:
    """The n-grams of one order: the tokens themselves (1) or adjacent ones joined by a space ("a b", 2, ...)."""
    if order < 1:
        raise ValueError(f"n-gram order must be at least 1, not {order}")
    if order == 1:
        return list(tokens)
    return [" ".join(tokens[i:i + order]) for i in range(len(tokens) - order + 1)]


# --- the formulas (numpy arrays or torch tensors) ---

def field_term_frequency(counts: Any, length_ratio: Any, weight: Any, b: Any) -> Any:
    """One field's share of TF_D: w_f · occurrences / (1 − b_f + b_f · length_f(d) / average_length_f).

    counts, length_ratio: matching shapes (length_ratio = length_f(d) / average_length_f of each count's document).
    An empty field (ratio 0) with b_f = 1 has denominator 0 and no occurrences: its share is 0, not 0 / 0."""
    return weight * counts / (1 - b + b * length_ratio + TINY)


def saturation(tf: Any, k: Any) -> Any:
    """tf / (k + tf), elementwise: the document side TF_D / (k1 + TF_D); 0 where tf = 0 (even with k = 0)."""
    return tf / (k + tf + TINY)


def query_term_weight(tf_q: Any, k3: Any) -> Any:
    """BM25F_ext's query side, (k3 + 1) · TF_Q / (k3 + TF_Q), elementwise: 1 for a term met once with unit weight,
    more for repeated terms up to k3 + 1."""
    return (k3 + 1) * tf_q / (k3 + tf_q + TINY)


def inverse_document_frequency(document_frequency: np.ndarray, n_documents: int) -> np.ndarray:
    """IDF(t) = log(N / df(t)) [vocabulary]; 0 for a term every document has."""
    return np.log(n_documents / np.asarray(document_frequency, dtype=np.float64))


# --- parameters ---

@dataclass(frozen=True)
class BM25FParams:
    """BM25F's free parameters: per field its weight w_f (≥ 0) and length normalisation b_f (in [0, 1]), the
    saturation k1 (≥ 0) and, for BM25F_ext only, the query-side saturation k3 (≥ 0). A field not named in `weights`
    or `b` takes DEFAULT_WEIGHT and DEFAULT_B, so `BM25FParams()` is the usual untuned BM25F."""

    weights: Mapping[str, float] = field(default_factory=dict)
    b: Mapping[str, float] = field(default_factory=dict)
    k1: float = 1.2
    k3: float = 1.0

    def __post_init__(self) -> None:
        weights = {str(name): float(value) for name, value in dict(self.weights).items()}
        b = {str(name): float(value) for name, value in dict(self.b).items()}
        bad = [f"weights[{n}]={v}" for n, v in weights.items() if not (math.isfinite(v) and v >= 0)]
        bad += [f"b[{n}]={v}" for n, v in b.items() if not 0 <= v <= 1]
        bad += [f"{n}={v}" for n, v in (("k1", self.k1), ("k3", self.k3)) if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ValueError("BM25F parameters out of range (weights, k1, k3 ≥ 0; b in [0, 1]): " + ", ".join(bad))
        object.__setattr__(self, "weights", MappingProxyType(weights))
        object.__setattr__(self, "b", MappingProxyType(b))
        object.__setattr__(self, "k1", float(self.k1))
        object.__setattr__(self, "k3", float(self.k3))

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.weights.items())), tuple(sorted(self.b.items())), self.k1, self.k3))

    def weight_of(self, name: str) -> float:
        return self.weights.get(name, DEFAULT_WEIGHT)

    def b_of(self, name: str) -> float:
        return self.b.get(name, DEFAULT_B)

    def named(self, fields: Sequence[str]) -> BM25FParams:
        """The same parameters with every one of `fields` named explicitly (what training and saving want)."""
        return BM25FParams({f: self.weight_of(f) for f in fields}, {f: self.b_of(f) for f in fields}, self.k1, self.k3)

    def with_value(self, name: str, value: float) -> BM25FParams:
        """A copy with one parameter changed: "k1", "k3", "weight:<field>" or "b:<field>"."""
        kind, _, field_name = name.partition(":")
        if name in ("k1", "k3"):
            return BM25FParams(self.weights, self.b, **{"k1": self.k1, "k3": self.k3, name: value})
        if kind == "weight" and field_name:
            return BM25FParams({**self.weights, field_name: value}, self.b, self.k1, self.k3)
        if kind == "b" and field_name:
            return BM25FParams(self.weights, {**self.b, field_name: value}, self.k1, self.k3)
        raise ValueError(f"unknown BM25F parameter {name!r} (k1, k3, weight:<field>, b:<field>)")

    def to_dict(self) -> dict[str, Any]:
        return {"weights": dict(self.weights), "b": dict(self.b), "k1": self.k1, "k3": self.k3}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BM25FParams:
        return cls(data.get("weights", {}), data.get("b", {}), data.get("k1", 1.2), data.get("k3", 1.0))


# --- the index ---

class BM25FIndex:
    """Per-field term counts of reports over one shared vocabulary of n-grams of one order, and the statistics
    BM25F needs (document frequency over all fields, field lengths and their means).

    documents: mappings holding the `fields` (a missing or None field is empty); order = positions of `scores`."""

    def __init__(self, documents: Sequence[Mapping[str, Any]], fields: Sequence[str], order: int = 1):
        if not fields:
            raise ValueError("BM25F needs at least one field")
        self.fields: tuple[str, ...] = tuple(fields)
        self.order = order
        self.n_documents = len(documents)
        self.vocabulary: dict[str, int] = {}
        columns: dict[str, list[int]] = {f: [] for f in self.fields}
        rows: dict[str, list[int]] = {f: [] for f in self.fields}
        self.lengths: dict[str, np.ndarray] = {f: np.zeros(self.n_documents) for f in self.fields}
        for position, document in enumerate(documents):
            for name in self.fields:
                grams = ngrams(tokenize(document.get(name)), order)
                self.lengths[name][position] = len(grams)
                columns[name].extend(self.vocabulary.setdefault(gram, len(self.vocabulary)) for gram in grams)
                rows[name].extend([position] * len(grams))
        shape = (self.n_documents, len(self.vocabulary))
        # duplicates (an n-gram met twice in a field) are summed by the COO -> CSC conversion
        self.counts: dict[str, sparse.csc_matrix] = {
            f: sparse.coo_matrix((np.ones(len(rows[f])), (rows[f], columns[f])), shape=shape).tocsc() for f in self.fields}
        self.average_lengths = {f: float(self.lengths[f].mean()) if self.n_documents else 0.0 for f in self.fields}
        self.length_ratios = {f: self.lengths[f] / self.average_lengths[f] if self.average_lengths[f] > 0
                              else np.zeros(self.n_documents) for f in self.fields}
        present = self.counts[self.fields[0]].astype(bool)
        for name in self.fields[1:]:
            present = present + self.counts[name].astype(bool)  # boolean sum: in any field
        self.document_frequency = np.asarray(present.sum(axis=0)).ravel().astype(np.int64)
        self.idf = inverse_document_frequency(np.maximum(self.document_frequency, 1), max(self.n_documents, 1))

    def __len__(self) -> int:
        return self.n_documents

    def query_terms(self, query_fields: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The query's n-grams that the vocabulary knows, as (columns [T], occurrences per field [T, fields]);
        unknown n-grams can match no document and are left out."""
        found: dict[int, np.ndarray] = {}
        for i, name in enumerate(self.fields):
            for gram in ngrams(tokenize(query_fields.get(name)), self.order):
                column = self.vocabulary.get(gram)
                if column is not None:
                    found.setdefault(column, np.zeros(len(self.fields)))[i] += 1
        terms = np.fromiter(found, dtype=np.int64, count=len(found))
        return terms, (np.stack(list(found.values())) if found else np.zeros((0, len(self.fields))))

    def _check(self, params: BM25FParams) -> None:
        unknown = (set(params.weights) | set(params.b)) - set(self.fields)
        if unknown:
            raise ValueError(f"BM25F parameters name fields {sorted(unknown)} that the index lacks {list(self.fields)}")

    def document_term_frequencies(self, terms: np.ndarray, params: BM25FParams) -> sparse.csc_matrix:
        """TF_D(d, t) of every document for the given vocabulary columns: sparse [documents, len(terms)]."""
        self._check(params)
        total = sparse.csc_matrix((self.n_documents, len(terms)))
        for name in self.fields:
            weight = params.weight_of(name)
            if weight == 0:
                continue
            block = self.counts[name][:, terms]  # a new matrix; CSC `indices` are its entries' documents
            block.data = field_term_frequency(block.data, self.length_ratios[name][block.indices], weight, params.b_of(name))
            total = total + block
        return total

    def scores(self, query_fields: Mapping[str, Any], params: BM25FParams, extended: bool = False) -> np.ndarray:
        """BM25F (or, `extended`, BM25F_ext) of the query report against every indexed document: [documents].

        query_fields: the query's text per field (fields the index lacks are ignored)."""
        terms, query_counts = self.query_terms(query_fields)
        if not len(terms):
            self._check(params)
            return np.zeros(self.n_documents)
        tf_d = self.document_term_frequencies(terms, params)
        tf_d.data = saturation(tf_d.data, params.k1)
        if extended:
            tf_q = query_counts @ np.array([params.weight_of(f) for f in self.fields])  # [T]
            query_side = query_term_weight(tf_q, params.k3)
        else:
            query_side = np.ones(len(terms))
        return np.asarray(tf_d @ (self.idf[terms] * query_side)).ravel()


def tune_bm25f(evaluate: Callable[[BM25FParams], float], start: BM25FParams,
               candidates: Mapping[str, Sequence[float]], rounds: int = 2) -> tuple[BM25FParams, float]:
    """Coordinate search: for each parameter of `candidates` in turn ("k1", "k3", "weight:<field>", "b:<field>" ->
    values to try) keep the value that maximises `evaluate` (e.g. MRR on dev) with the others fixed; `rounds`
    passes, stopping early when a pass changes nothing. Returns the best parameters and their figure; ties keep
    the incumbent, so the result is deterministic."""
    best, best_value = start, evaluate(start)
    cache: dict[BM25FParams, float] = {start: best_value}
    for _ in range(rounds):
        changed = False
        for name, values in candidates.items():
            for value in values:
                trial = best.with_value(name, value)
                if trial not in cache:
                    cache[trial] = evaluate(trial)
                if cache[trial] > best_value:
                    best, best_value, changed = trial, cache[trial], True
        if not changed:
            break
    return best, best_value

