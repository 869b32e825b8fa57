"""REP (Sun, Lo, Khoo, Jiang, ASE 2011): the classical learned peer for duplicate bug-report retrieval.

REP is what the field's papers beat or fail to beat (on recent Jira data it outranks the deep models; see
notes/duplicate-detection-protocol.md), so a bench needs it on our data, in the field's protocol. It scores a query
report q against a report d by a weighted sum of seven features:

    REP(q, d) = Σ_i w_i · f_i(q, d)
    f1 = BM25F_ext(q, d) over unigrams            f2 = BM25F_ext(q, d) over bigrams       (`retrieval.bm25f`)
    f3 = 1 if same product, else 0                f4 = 1 if same component, else 0
    f5 = 1 if same type, else 0
    f6 = 1 / (1 + |priority(q) − priority(d)|)    f7 = 1 / (1 + |version(q) − version(d)|)

A categorical feature (f3–f5) is 0 when either value is blank; f6 and f7 are 0 when either value is blank or not
understood (`priority_rank`, `version_key`), so a tracker that leaves a field empty makes its feature inert rather
than a match. Values are compared exactly after stripping white space.

Learning (the paper's): on triples (query, relevant report, irrelevant report) minimise the RankNet loss

    RNC = log(1 + exp(REP(q, irr) − REP(q, rel)))

by gradient descent over the 7 feature weights and the free parameters of both BM25F_ext (per text field w_f, b_f,
plus k1, k3: 19 parameters for two fields, as in the paper). The training here uses torch autograd over the very
formula functions the numpy scoring uses, evaluated only on each triple's (query, document) shared n-grams; Adam on
the full batch, each step projected back into the constraints (w_i ≥ 0, w_f ≥ 0, b_f in [0, 1], k1, k3 ≥ 0).
`training_triples` samples the paper's training set: for each (duplicate, master) pair, seeded irrelevant reports
from outside the duplicate's group.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Optional, Sequence

import numpy as np

from lmplatform.data.groups import DuplicateGroups
from lmplatform.retrieval.bm25f import (
    BM25FIndex,
    BM25FParams,
    field_term_frequency,
    query_term_weight,
    saturation,
)

FEATURES = ("bm25f_unigram", "bm25f_bigram", "same_product", "same_component", "same_type", "priority_closeness",
            "version_closeness")

# Priorities as ranks, 1 the most urgent: P1..P5 (Bugzilla, many trackers), Jira's priority names (old and new),
# Bugzilla's named priorities. Anything else (blank, "--", "enhancement") is unknown.
PRIORITY_RANKS = {
    **{f"p{i}": float(i) for i in range(1, 6)},
    "blocker": 1.0, "critical": 2.0, "major": 3.0, "minor": 4.0, "trivial": 5.0,
    "highest": 1.0, "high": 2.0, "medium": 3.0, "normal": 3.0, "low": 4.0, "lowest": 5.0,
}
_VERSION = re.compile(r"\d+(?:\.\d+)*")
VERSION_PART_LIMIT = 999  # minor and patch components above this are clipped, so they never carry into the next


def priority_rank(value: Any) -> Optional[float]:
    """A priority as a number (1 = most urgent ... 5), or None when blank or not one of PRIORITY_RANKS."""
    if value is None:
        return None
    return PRIORITY_RANKS.get(str(value).strip().lower())


def version_key(value: Any) -> Optional[float]:
    """A version string as a comparable number: the first run of dot-separated digits, major.minor.patch ->
    major + minor / 1000 + patch / 1,000,000 (parts beyond the third ignored, minor and patch clipped to 999), so
    "3.2.1" -> 3.002001, "OOo 2.0" -> 2.0, "3.10" > "3.9". Under f7 = 1 / (1 + |Δ|) a major release apart gives 0.5,
    minor releases apart barely less than 1. None when blank or without digits ("unspecified", "trunk")."""
    if value is None:
        return None
    match = _VERSION.search(str(value))
    if not match:
        return None
    parts = [int(p) for p in match.group().split(".")[:3]] + [0, 0]
    minor, patch = min(parts[1], VERSION_PART_LIMIT), min(parts[2], VERSION_PART_LIMIT)
    return parts[0] + minor / 1e3 + patch / 1e6


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


# --- the features' maths ---

def same_value(codes: np.ndarray, code: int) -> np.ndarray:
    """f3–f5: 1.0 where a document's category code equals the query's, else 0 [documents]. Blank is code -1 and
    never matches, not even a blank query."""
    return ((codes == code) & (code >= 0)).astype(np.float64)


def closeness(values: np.ndarray, value: Optional[float]) -> np.ndarray:
    """f6, f7: 1 / (1 + |value − values|) [documents]; 0 where a document's value is unknown (NaN) or the query's
    is (None)."""
    if value is None:
        return np.zeros(len(values))
    result = 1.0 / (1.0 + np.abs(values - value))
    return np.where(np.isnan(values), 0.0, result)


@dataclass(frozen=True)
class RepFields:
    """Which fields of a report REP reads (defaults: the names in our bug-report corpora)."""

    id: str = "id"
    text: tuple[str, ...] = ("title", "description")  # the paper's summary and description
    product: str = "product"
    component: str = "component"
    type: str = "type"
    priority: str = "priority"
    version: str = "version"


class RepIndex:
    """The reports REP ranks: BM25F indexes of their unigrams and bigrams, and their categorical fields as codes
    (blank -1), priorities and versions as numbers (unknown NaN). Positions follow `reports`."""

    def __init__(self, reports: Sequence[Mapping[str, Any]], fields: RepFields = RepFields()):
        self.fields = fields
        self.reports = list(reports)
        self.ids = [_text(r.get(fields.id)) for r in self.reports]
        self.positions = {doc_id: i for i, doc_id in enumerate(self.ids)}
        if len(self.positions) != len(self.ids):
            raise ValueError("report ids must be unique")
        self.unigrams = BM25FIndex(self.reports, fields.text, order=1)
        self.bigrams = BM25FIndex(self.reports, fields.text, order=2)
        self.categories: dict[str, dict[str, int]] = {}
        self.codes: dict[str, np.ndarray] = {}
        for name in (fields.product, fields.component, fields.type):
            values = [_text(r.get(name)) for r in self.reports]
            self.categories[name] = {v: i for i, v in enumerate(sorted(set(values) - {""}))}
            self.codes[name] = np.array([self.categories[name].get(v, -1) for v in values], dtype=np.int64)
        self.priorities = np.array([_or_nan(priority_rank(r.get(fields.priority))) for r in self.reports])
        self.versions = np.array([_or_nan(version_key(r.get(fields.version))) for r in self.reports])

    def __len__(self) -> int:
        return len(self.reports)

    def code(self, name: str, value: Any) -> int:
        """A query's category code: -1 when blank, -2 for a value no report has (matches nothing)."""
        text = _text(value)
        return -1 if not text else self.categories[name].get(text, -2)


def _or_nan(value: Optional[float]) -> float:
    return math.nan if value is None else value


def metadata_features(query: Mapping[str, Any], index: RepIndex, positions: Optional[np.ndarray] = None) -> np.ndarray:
    """f3–f7 of the query against the indexed reports at `positions` (default all): [len(positions), 5]."""
    fields = index.fields
    selected = slice(None) if positions is None else np.asarray(positions, dtype=np.int64)
    columns = [same_value(index.codes[name][selected], index.code(name, query.get(name)))
               for name in (fields.product, fields.component, fields.type)]
    columns.append(closeness(index.priorities[selected], priority_rank(query.get(fields.priority))))
    columns.append(closeness(index.versions[selected], version_key(query.get(fields.version))))
    return np.stack(columns, axis=1)


def rep_features(query: Mapping[str, Any], index: RepIndex, unigram: BM25FParams, bigram: BM25FParams) -> np.ndarray:
    """The seven features (FEATURES) of one query report against every indexed report: [documents, 7]."""
    text = {name: query.get(name) for name in index.fields.text}
    return np.column_stack([index.unigrams.scores(text, unigram, extended=True),
                            index.bigrams.scores(text, bigram, extended=True),
                            metadata_features(query, index)])


# --- training data ---

def training_triples(pairs: Sequence[tuple[str, str]], ids: Sequence[str], negatives: int = 20, seed: int = 0,
                     groups: Optional[Mapping[str, Hashable]] = None) -> list[tuple[str, str, str]]:
    """The paper's training set: for each (duplicate, master) pair, `negatives` triples (duplicate, master,
    irrelevant), the irrelevant reports drawn without replacement (numpy, `seed`) from `ids` outside the
    duplicate's group (all of them when fewer remain). groups: report id -> group key; default the groups that
    `pairs` link (union-find), a report in no pair being a group of its own."""
    ids = list(ids)
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    for duplicate, master in pairs:
        for doc_id in (duplicate, master):
            if doc_id not in position:
                raise ValueError(f"pair ({duplicate}, {master}): report {doc_id!r} is not among the ids")
    if groups is None:
        links: DuplicateGroups[str] = DuplicateGroups()
        for duplicate, master in pairs:
            links.link(duplicate, master)
        groups = {doc_id: links.find(doc_id) for doc_id in links.parent}
    group_of = [groups.get(doc_id, ("alone", doc_id)) for doc_id in ids]
    members: dict[Hashable, set[int]] = {}
    for i, key in enumerate(group_of):
        members.setdefault(key, set()).add(i)
    rng = np.random.default_rng(seed)
    triples = []
    for duplicate, master in pairs:
        # the pair itself is never irrelevant, even where `groups` leaves it out
        excluded = members[group_of[position[duplicate]]] | {position[duplicate], position[master]}
        wanted = min(negatives, len(ids) - len(excluded))
        chosen: dict[int, None] = {}  # insertion-ordered set
        while len(chosen) < wanted:
            for i in rng.integers(0, len(ids), size=2 * (wanted - len(chosen))).tolist():
                if i not in excluded and len(chosen) < wanted:
                    chosen.setdefault(i)
        triples.extend((duplicate, master, ids[i]) for i in chosen)
    return triples


# --- the model ---

DEFAULT_WEIGHTS = (1.0,) * len(FEATURES)


@dataclass(frozen=True)
class RepModel:
    """REP's 7 feature weights (FEATURES order) and the BM25F_ext parameters of unigrams and bigrams. The defaults
    are a neutral start (every weight 1, untuned BM25F), not the paper's values; `fit` learns all of them."""

    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    unigram: BM25FParams = field(default_factory=BM25FParams)
    bigram: BM25FParams = field(default_factory=BM25FParams)

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"REP has {len(FEATURES)} feature weights ({', '.join(FEATURES)}), not {len(self.weights)}")
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))

    def features(self, query: Mapping[str, Any], index: RepIndex) -> np.ndarray:
        """[documents, 7]: `rep_features` with this model's BM25F_ext parameters."""
        return rep_features(query, index, self.unigram, self.bigram)

    def score(self, query: Mapping[str, Any], index: RepIndex) -> np.ndarray:
        """REP(q, d) = Σ_i w_i · f_i(q, d) for every indexed report d: [documents]."""
        return self.features(query, index) @ np.array(self.weights)

    def fit(self, index: RepIndex, triples: Sequence[tuple[str, str, str]], steps: int = 300,
            learning_rate: float = 0.02) -> RepModel:
        """A new model fitted from this one on (query id, relevant id, irrelevant id) triples of indexed reports by
        RankNet (see the module doc). Deterministic: full-batch Adam, no sampling."""
        import torch

        batch = _TripleBatch(index, triples)
        start = _Parameters.from_model(self, index.fields.text)
        values = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in start.vectors()]
        optimiser = torch.optim.Adam(values, lr=learning_rate)
        for _ in range(steps):
            optimiser.zero_grad()
            loss = batch.loss(_Parameters(*values))
            if not torch.isfinite(loss):
                raise FloatingPointError(f"RankNet loss became {float(loss)}; try a smaller learning rate")
            loss.backward()
            optimiser.step()
            with torch.no_grad():
                _Parameters(*values).project()
        return _Parameters(*[v.detach() for v in values]).to_model(index.fields.text)

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(FEATURES), "weights": list(self.weights), "unigram": self.unigram.to_dict(),
                "bigram": self.bigram.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RepModel:
        if list(data.get("features", FEATURES)) != list(FEATURES):
            raise ValueError(f"saved REP features {data.get('features')} are not {list(FEATURES)}")
        return cls(tuple(data["weights"]), BM25FParams.from_dict(data["unigram"]), BM25FParams.from_dict(data["bigram"]))


def rank_net_loss(model: RepModel, index: RepIndex, triples: Sequence[tuple[str, str, str]]) -> float:
    """Mean RNC = log(1 + exp(REP(q, irr) − REP(q, rel))) of the model over the triples."""
    import torch

    with torch.no_grad():
        vectors = _Parameters.from_model(model, index.fields.text).vectors()
        return float(_TripleBatch(index, triples).loss(_Parameters(*[torch.tensor(v) for v in vectors])))


# --- the differentiable re-implementation for training (torch) ---

@dataclass
class _Parameters:
    """REP's learnable values as tensors: feature weights [7]; per n-gram order field weights [F], b [F], k1, k3."""

    weights: Any
    unigram_weights: Any
    unigram_b: Any
    unigram_k: Any  # [k1, k3]
    bigram_weights: Any
    bigram_b: Any
    bigram_k: Any

    @classmethod
    def from_model(cls, model: RepModel, text_fields: Sequence[str]) -> _Parameters:
        def order(params: BM25FParams) -> list[np.ndarray]:
            return [np.array([params.weight_of(f) for f in text_fields]), np.array([params.b_of(f) for f in text_fields]),
                    np.array([params.k1, params.k3])]
        return cls(np.array(model.weights), *order(model.unigram), *order(model.bigram))

    def vectors(self) -> list[Any]:
        return [self.weights, self.unigram_weights, self.unigram_b, self.unigram_k, self.bigram_weights, self.bigram_b,
                self.bigram_k]

    def project(self) -> None:
        """In place: weights, k1, k3 ≥ 0; b in [0, 1]."""
        for value in (self.weights, self.unigram_weights, self.unigram_k, self.bigram_weights, self.bigram_k):
            value.clamp_(min=0.0)
        for value in (self.unigram_b, self.bigram_b):
            value.clamp_(0.0, 1.0)

    def to_model(self, text_fields: Sequence[str]) -> RepModel:
        def params(weights: Any, b: Any, k: Any) -> BM25FParams:
            return BM25FParams(dict(zip(text_fields, weights.tolist())), dict(zip(text_fields, b.tolist())),
                               float(k[0]), float(k[1]))
        return RepModel(tuple(self.weights.tolist()), params(self.unigram_weights, self.unigram_b, self.unigram_k),
                        params(self.bigram_weights, self.bigram_b, self.bigram_k))


class _SharedTerms:
    """For the (query, document) pairs of a batch and one n-gram order, one row per (pair, n-gram in both):
    pair [R], idf [R], the document's occurrences per field [R, F] with its length ratios [R, F], and the query's
    occurrences per field [R, F]. Enough to evaluate BM25F_ext of every pair under any parameters."""

    def __init__(self, bm25f: BM25FIndex, queries: Sequence[Mapping[str, Any]], documents: Sequence[np.ndarray],
                 pair_ids: Sequence[np.ndarray], n_pairs: int):
        import torch

        pair, idf, doc_counts, ratios, query_counts = [], [], [], [], []
        for query, docs, ids in zip(queries, documents, pair_ids):
            terms, q_counts = bm25f.query_terms(query)  # [T], [T, F]
            if not len(terms):
                continue
            counts = np.stack([bm25f.counts[f][:, terms][docs].toarray() for f in bm25f.fields], axis=-1)  # [D, T, F]
            d, t = np.nonzero(counts.sum(axis=-1))
            pair.append(ids[d])
            idf.append(bm25f.idf[terms][t])
            doc_counts.append(counts[d, t])
            ratios.append(np.stack([bm25f.length_ratios[f][docs][d] for f in bm25f.fields], axis=-1))
            query_counts.append(q_counts[t])
        width = len(bm25f.fields)

        def cat(parts: list[np.ndarray], shape: tuple[int, ...]) -> Any:
            return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(shape))

        self.pair = cat(pair, (0,)).long()
        self.idf = cat(idf, (0,)).double()
        self.doc_counts, self.ratios = cat(doc_counts, (0, width)).double(), cat(ratios, (0, width)).double()
        self.query_counts = cat(query_counts, (0, width)).double()
        self.n_pairs = n_pairs

    def bm25f_ext(self, weights: Any, b: Any, k: Any) -> Any:
        """BM25F_ext of every pair [n_pairs] (the module bm25f's formula functions, on tensors)."""
        import torch

        tf_d = field_term_frequency(self.doc_counts, self.ratios, weights, b).sum(dim=-1)
        tf_q = (self.query_counts * weights).sum(dim=-1)
        contribution = self.idf * saturation(tf_d, k[0]) * query_term_weight(tf_q, k[1])
        return torch.zeros(self.n_pairs, dtype=torch.float64).index_add(0, self.pair, contribution)


class _TripleBatch:
    """The distinct (query, document) pairs of the triples (a query's relevant report recurs in each of its
    triples; it is computed once): their shared n-grams per order and their fixed features f3–f7 [pairs, 5], and
    per triple the pairs of its relevant and irrelevant report (`relevant`, `irrelevant`: [M])."""

    def __init__(self, index: RepIndex, triples: Sequence[tuple[str, str, str]]):
        import torch

        try:
            positions = np.array([[index.positions[i] for i in triple] for triple in triples], dtype=np.int64)
        except KeyError as missing:
            raise ValueError(f"triple names report {missing.args[0]!r}, which the index lacks") from None
        if not len(positions):
            raise ValueError("no training triples")
        asked = np.concatenate([positions[:, [0, 1]], positions[:, [0, 2]]])  # [2M, 2]: (query, document)
        pairs, which = np.unique(asked, axis=0, return_inverse=True)  # sorted by query, then document
        which = which.ravel()
        self.relevant, self.irrelevant = torch.from_numpy(which[:len(positions)]), torch.from_numpy(which[len(positions):])
        queries, documents, pair_ids = [], [], []
        fixed = np.zeros((len(pairs), 5))
        starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
        for first, stop in zip(starts, np.r_[starts[1:], len(pairs)]):
            ids = np.arange(first, stop)
            report = index.reports[pairs[first, 0]]
            queries.append({f: report.get(f) for f in index.fields.text})
            documents.append(pairs[ids, 1])
            pair_ids.append(ids)
            fixed[ids] = metadata_features(report, index, pairs[ids, 1])
        self.unigrams = _SharedTerms(index.unigrams, queries, documents, pair_ids, len(pairs))
        self.bigrams = _SharedTerms(index.bigrams, queries, documents, pair_ids, len(pairs))
        self.fixed = torch.from_numpy(fixed)

    def scores(self, p: _Parameters) -> Any:
        """REP of every distinct pair [pairs]."""
        import torch

        features = torch.cat([self.unigrams.bm25f_ext(p.unigram_weights, p.unigram_b, p.unigram_k)[:, None],
                              self.bigrams.bm25f_ext(p.bigram_weights, p.bigram_b, p.bigram_k)[:, None],
                              self.fixed], dim=1)
        return features @ p.weights

    def loss(self, p: _Parameters) -> Any:
        """Mean RankNet loss softplus(REP(q, irr) − REP(q, rel)) over the triples."""
        import torch

        scores = self.scores(p)
        return torch.nn.functional.softplus(scores[self.irrelevant] - scores[self.relevant]).mean()
