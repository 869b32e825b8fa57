"""Retrieval metrics over ranked id lists and relevance sets.

Notation: R is a query's relevance set, d_1, d_2, ... its ranking (duplicates removed, see below),
top_k = {d_1, ..., d_k}.

Conventions (shared by every function here):
- A *ranking* is a sequence of document ids, best first. If an id appears more
  than once only its first occurrence counts (later copies are ignored, so a
  retriever cannot earn credit twice for one document).
- *Relevant* is a set of ids; relevance is binary.
- Ties: metrics see only the order they are given. Retrievers that produce
  equal scores must order them deterministically; `rank_by_score` does that with
  the rule "higher score first, then smaller id (string order) first", and
  every retriever in `lmplatform.retrieval` uses it.
- A query whose relevance set is empty has no defined recall, MRR or AP: the
  per-query functions raise `ValueError`, and `retrieval_report` skips such
  queries and reports how many it skipped (`queries_skipped_no_relevant`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

DEFAULT_KS = (1, 3, 5, 10, 15, 20)
DEFAULT_MRR_KS = (5, 15)


def rank_by_score(scored: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Sort (id, score) pairs best first; equal scores are ordered by id so results are reproducible."""
    return sorted(scored, key=lambda pair: (-float(pair[1]), str(pair[0])))


def _dedupe(ranking: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for doc in ranking:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


def _check(relevant: set[str] | frozenset[str], k: int | None = None) -> None:
    if not relevant:
        raise ValueError("relevance set is empty: recall, MRR and AP are undefined for this query")
    if k is not None and k <= 0:
        raise ValueError(f"k must be a positive integer, got {k}")


def recall_at_k(ranking: Sequence[str], relevant: set[str] | frozenset[str], k: int) -> float:
    """Fraction of the relevant documents found in the top k: recall@k = |top_k ∩ R| / |R|."""
    _check(relevant, k)
    return len(set(_dedupe(ranking)[:k]) & set(relevant)) / len(relevant)


def hit_at_k(ranking: Sequence[str], relevant: set[str] | frozenset[str], k: int) -> float:
    """hit@k = 1 if |top_k ∩ R| > 0 else 0: whether any relevant document is in the top k (the
    duplicate-detection "recall rate")."""
    _check(relevant, k)
    return 1.0 if set(_dedupe(ranking)[:k]) & set(relevant) else 0.0


def precision_at_k(ranking: Sequence[str], relevant: set[str] | frozenset[str], k: int = 1) -> float:
    """P@k = |top_k ∩ R| / k: the fraction of the top k that is relevant; the denominator is k even if fewer
    were returned."""
    _check(relevant, k)
    return len(set(_dedupe(ranking)[:k]) & set(relevant)) / k


def mrr_at_k(ranking: Sequence[str], relevant: set[str] | frozenset[str], k: int) -> float:
    """MRR@k = 1 / min{i <= k : d_i ∈ R}, the reciprocal rank of the first relevant document; 0 if none is in
    the top k."""
    _check(relevant, k)
    for position, doc in enumerate(_dedupe(ranking)[:k], start=1):
        if doc in relevant:
            return 1.0 / position
    return 0.0


def ndcg_at_k(ranking: Sequence[str], relevant: set[str] | frozenset[str], k: int) -> float:
    """Binary-relevance nDCG@k = DCG@k / IDCG@k, DCG@k = Σ_{i <= k, d_i ∈ R} 1 / log2(i + 1), and IDCG@k the
    DCG of the ideal ranking: Σ_{i=1}^{min(|R|, k)} 1 / log2(i + 1) (every relevant document first)."""
    _check(relevant, k)
    gains = sum(1.0 / math.log2(position + 1)
                for position, doc in enumerate(_dedupe(ranking)[:k], start=1) if doc in relevant)
    ideal = sum(1.0 / math.log2(position + 1) for position in range(1, min(len(relevant), k) + 1))
    return gains / ideal


def average_precision(ranking: Sequence[str], relevant: set[str] | frozenset[str], k: int | None = None) -> float:
    """AP = (1 / |R|) Σ_{i : d_i ∈ R} P@i, over the ranks i (<= k when k is given) of relevant documents.

    Relevant documents that were not retrieved (or fall below k) contribute 0.
    """
    _check(relevant, k)
    ranked = _dedupe(ranking)
    if k is not None:
        ranked = ranked[:k]
    hits = 0
    total = 0.0
    for position, doc in enumerate(ranked, start=1):
        if doc in relevant:
            hits += 1
            total += hits / position
    return total / len(relevant)


def mean_average_precision(
    rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, set[str] | frozenset[str]], k: int | None = None
) -> float:
    """MAP = the mean of AP over the queries of `qrels` with a non-empty relevance set (a missing ranking
    scores 0)."""
    values = [average_precision(rankings.get(q, []), rel, k) for q, rel in qrels.items() if rel]
    if not values:
        raise ValueError("no query has a relevant document")
    return sum(values) / len(values)


@dataclass
class RetrievalReport:
    metrics: dict[str, float]
    queries_evaluated: int
    queries_skipped_no_relevant: int
    queries_without_ranking: int
    per_query: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    def to_dict(self, per_query: bool = False) -> dict:
        out = {
            "metrics": self.metrics,
            "queries_evaluated": self.queries_evaluated,
            "queries_skipped_no_relevant": self.queries_skipped_no_relevant,
            "queries_without_ranking": self.queries_without_ranking,
        }
        if per_query:
            out["per_query"] = self.per_query
        return out


def retrieval_report(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, set[str] | frozenset[str]],
    ks: Sequence[int] = DEFAULT_KS,
    mrr_ks: Sequence[int] = DEFAULT_MRR_KS,
) -> RetrievalReport:
    """Macro-averaged recall@k, hit@k, nDCG@k, MRR@k, P@1 and MAP over the queries in `qrels`.

    Queries with an empty relevance set are skipped and counted. A query with no
    ranking (the retriever returned nothing) is scored as an empty ranking: 0.
    """
    for k in (*ks, *mrr_ks):
        if k <= 0:
            raise ValueError(f"k must be a positive integer, got {k}")
    per_query: dict[str, dict[str, float]] = {}
    skipped = missing = 0
    for query, relevant in qrels.items():
        if not relevant:
            skipped += 1
            continue
        if query not in rankings:
            missing += 1
        ranking = _dedupe(rankings.get(query, []))
        row = {f"recall@{k}": recall_at_k(ranking, relevant, k) for k in ks}
        row.update({f"hit@{k}": hit_at_k(ranking, relevant, k) for k in ks})
        row.update({f"ndcg@{k}": ndcg_at_k(ranking, relevant, k) for k in ks})
        row.update({f"mrr@{k}": mrr_at_k(ranking, relevant, k) for k in mrr_ks})
        row["p@1"] = precision_at_k(ranking, relevant, 1)
        row["map"] = average_precision(ranking, relevant)
        per_query[query] = row
    if not per_query:
        raise ValueError(f"no query has a relevant document ({skipped} skipped with an empty relevance set)")
    names = list(next(iter(per_query.values())))
    metrics = {name: sum(row[name] for row in per_query.values()) / len(per_query) for name in names}
    return RetrievalReport(metrics, len(per_query), skipped, missing, per_query)
