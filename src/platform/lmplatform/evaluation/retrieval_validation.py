"""Corpus-level retrieval validation: a fixed set of queries, a candidate pool and relevance, scored per query.

The driver builds a `RetrievalSet` once from pairs (and distractor documents); whoever holds a model
turns it into rankings (`dense_rankings`, `hybrid_rankings`, `reranked_rankings`) and `score_rankings`
turns those into per-query metrics. `choose_bm25_weight` picks the BM25 weight of hybrid retrieval on a set.
Two rules make the numbers trustworthy for choosing between models:

- Ties count against the query (`rank_against_query`): a collapsed encoder, whose vectors are all
  equal, ranks every relevant document last and scores near 0, not 1.
- Every query is ranked against the whole pool, not against its batch, so the score does not
  depend on the batch size.

Candidates are distinct texts: a distractor identical to a validation document is one candidate,
and the candidate identical to a query's own text is never ranked for that query.

With `protocol: online` (`online_set_from_pairs`, `evaluation.online_validation`) a query's excluded candidates are
every text not filed before it within the window, and `score_rankings` scores the rank of its duplicate group's
bucket: every ranking function above serves both protocols unchanged.
"""
from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Callable, Collection, Hashable, Mapping, Optional, Sequence, TypeVar

import numpy as np

from lmplatform.config.schema import DataConfig
from lmplatform.data.groups import DuplicateGroups
from lmplatform.data.pairs import Pair, read_pairs
from lmplatform.data.readers import DataError
from lmplatform.evaluation.distractors import distractor_rows
from lmplatform.evaluation.online import Timeline, candidate_mask, later_ends
from lmplatform.evaluation.online_validation import MaskSet, bucket_rank_of, online_metrics, text_times
from lmplatform.metrics.retrieval import average_precision, mrr_at_k, ndcg_at_k, rank_by_score, recall_at_k
from lmplatform.models.kind import CROSS_ENCODER
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.retrieval.faiss_import import exact_search
from lmplatform.retrieval.fusion import fuse
from lmplatform.retrieval.retrievers import BM25Retriever, DenseRetriever
from lmplatform.retrieval.settings import DistractorConfig, FusionSettings, RetrievalValidationConfig, hybrid_metric_name

T = TypeVar("T", bound=Hashable)


@dataclass
class RetrievalSet:
    """Queries, a candidate pool and, per query, the relevant and the excluded candidate indices."""

    query_texts: list[str]
    candidate_texts: list[str]
    relevant: list[frozenset[int]]
    excluded: list[AbstractSet[int]]  # a frozenset; protocol online: a MaskSet (most of the pool)
    counts: dict[str, int] = field(default_factory=dict)
    first_stage: Optional[list[list[int]]] = None  # cross-encoder validation: the candidates it re-ranks, per query
    buckets: Optional[np.ndarray] = None  # protocol online: int64 [candidates], each candidate's duplicate-group bucket
    _bm25: Optional[BM25Retriever] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.query_texts:
            raise DataError("retrieval validation has no query with a relevant candidate "
                            f"(counts: {self.counts}); check retrieval_validation.pairs and split")

    def bm25(self) -> BM25Retriever:
        """A BM25 index over the candidates (ids str(0..n-1)), built on first use and kept."""
        if self._bm25 is None:
            self._bm25 = BM25Retriever()
            self._bm25.index([str(i) for i in range(len(self.candidate_texts))], self.candidate_texts)
        return self._bm25

    def fingerprint(self) -> str:
        """Same fingerprint <=> same queries, pool, relevance and exclusions (in the same order)."""
        digest = hashlib.sha256()
        for text in (*self.query_texts, "\x00", *self.candidate_texts):
            digest.update(text.encode("utf-8", "surrogatepass") + b"\x1f")
        for group in (*self.relevant, *self.excluded):
            digest.update(repr(sorted(group)).encode())
        if self.buckets is not None:
            digest.update(b"online" + np.asarray(self.buckets, dtype=np.int64).tobytes())
        return digest.hexdigest()[:16]

    def summary(self) -> str:
        c = self.counts
        return (f"retrieval validation: {c['queries']} queries ranked against {c['candidates']} candidates "
                f"({c['distractors']} distractors)"
                + (f"; {c['queries_without_relevant']} queries skipped: no relevant candidate with a text other than "
                   "the query's own (e.g. a duplicate identical to its original)" if c.get("queries_without_relevant") else "")
                + (f"; first stage finds a relevant candidate for {c['first_stage_queries_with_a_relevant']}"
                   if "first_stage_queries_with_a_relevant" in c else "")
                + (f"; online protocol: {c['queries_without_earlier_relevant']} queries without an earlier relevant "
                   f"candidate in the window (misses), {c['unknown_time']} texts of unknown time, "
                   f"{c['pairs_without_query']} pairs without a query" if self.buckets is not None else ""))


def rank_against_query(ids: Sequence[T], scores: Sequence[float], relevant: Collection[T], complete: bool) -> list[T]:
    """The ids best first, with ties broken against the query: at equal scores non-relevant ids come first.

    ids, scores: [n] what a search returned (excluded ids already removed), in any order.
    complete: the ids are the whole pool. Otherwise some candidate that was not returned may share the
    lowest score returned, so a relevant id at that score is dropped, as if ranked below the cut.
    """
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i] in relevant))
    floor = min((float(s) for s in scores), default=0.0)
    return [ids[i] for i in order if complete or not (ids[i] in relevant and float(scores[i]) == floor)]


def score_rankings(rankings: Sequence[Sequence[int]], rset: RetrievalSet,
                   cfg: RetrievalValidationConfig) -> dict[str, np.ndarray]:
    """Per-query metrics [queries] for each name of `cfg.ranking_metric_names()` (an online set: of the rank of
    each query's duplicate-group bucket, `online_validation.online_metrics`)."""
    if rset.buckets is not None:
        buckets = rset.buckets
        return online_metrics([bucket_rank_of(r, rel, buckets) for r, rel in zip(rankings, rset.relevant)], cfg)
    out: dict[str, list[float]] = defaultdict(list)
    for ranking, relevant in zip(rankings, rset.relevant):
        for k in cfg.recall_ks:
            out[f"ir_recall_at_{k}"].append(recall_at_k(ranking, relevant, k))
        out[f"ir_mrr_at_{cfg.mrr_k}"].append(mrr_at_k(ranking, relevant, cfg.mrr_k))
        out[f"ir_ndcg_at_{cfg.ndcg_k}"].append(ndcg_at_k(ranking, relevant, cfg.ndcg_k))
        out[f"ir_map_at_{cfg.map_k}"].append(average_precision(ranking, relevant, cfg.map_k))
    return {name: np.asarray(values, dtype=np.float64) for name, values in out.items()}


def summarize(per_query: dict[str, np.ndarray], rset: RetrievalSet) -> dict[str, float]:
    """Means over queries, plus the set's size."""
    means = {name: float(values.mean()) for name, values in per_query.items()}
    return means | {"ir_queries": float(len(rset.query_texts)), "ir_candidates": float(len(rset.candidate_texts))}


# -- rankings from a model's outputs ------------------------------------------------------------------
def dense_rankings(query_vectors: np.ndarray, candidate_vectors: np.ndarray, rset: RetrievalSet, depth: int) -> list[list[int]]:
    """Exact inner-product search (FAISS flat), then tie-aware ranking; vectors [q, d] and [n, d], normalised."""
    pool = len(rset.candidate_texts)
    # One beyond the deepest cut-off shows whether the last kept score is shared further down.
    width = min(pool, depth + 1 + max((len(e) for e in rset.excluded), default=0))
    scores, found = exact_search(query_vectors, candidate_vectors, width)
    rankings = []
    for row, (row_scores, row_ids) in enumerate(zip(scores, found)):
        keep = [(int(i), float(s)) for i, s in zip(row_ids, row_scores) if i >= 0 and int(i) not in rset.excluded[row]]
        ranked = rank_against_query([i for i, _ in keep], [s for _, s in keep], rset.relevant[row], complete=width == pool)
        rankings.append(ranked[:depth])
    return rankings


def hybrid_hits(dense_scores: np.ndarray, bm25: BM25Retriever, rset: RetrievalSet, depth: int,
                settings: FusionSettings) -> list[list[tuple[int, float]]]:
    """BM25 fused with dense scores through `retrieval.fusion.fuse`, as `HybridRetriever` and `/v1/search` fuse:
    per query, (candidate, fused score) best first, ties against the query.

    dense_scores: [q, n] each query's inner product with every candidate; bm25: a BM25 index over the
    candidates, ids str(0..n-1) (`RetrievalSet.bm25`). Each retriever contributes its top
    max(depth, settings.hybrid_candidates) with the query's excluded candidates removed; the pool is ranked by
    its fused scores. A relevant candidate outside the pool is not ranked.
    """
    width = max(depth, settings.hybrid_candidates)
    out = []
    for row, (scores, bm25_row) in enumerate(zip(dense_scores, bm25.query_scores(rset.query_texts))):
        excluded = rset.excluded[row]
        top = min(len(scores), width + len(excluded))
        nearest = np.argpartition(-scores, top - 1)[:top] if top < len(scores) else np.arange(len(scores))
        dense_hits = [h for h in rank_by_score((str(i), float(scores[i])) for i in nearest) if int(h[0]) not in excluded]
        bm25_hits = [h for h in bm25.top_hits(bm25_row, width + len(excluded)) if int(h[0]) not in excluded]

        def exact(pool: list[str], scores: np.ndarray = scores, bm25_row: np.ndarray = bm25_row) -> tuple[np.ndarray, np.ndarray]:
            return scores[[int(i) for i in pool]], bm25_row[bm25.positions(pool)]

        fused = {int(doc): score for doc, score in fuse(dense_hits[:width], bm25_hits[:width], exact, settings)}
        ids = rank_against_query(list(fused), list(fused.values()), rset.relevant[row], complete=True)
        out.append([(i, fused[i]) for i in ids])
    return out


def hybrid_rankings(dense_scores: np.ndarray, bm25: BM25Retriever, rset: RetrievalSet, depth: int,
                    settings: FusionSettings) -> list[list[int]]:
    """The candidates of `hybrid_hits`, the first `depth` per query."""
    return [[i for i, _ in hits[:depth]] for hits in hybrid_hits(dense_scores, bm25, rset, depth, settings)]


def reranked_rankings(pair_scores: np.ndarray, rset: RetrievalSet, depth: int, rerank: int) -> list[list[int]]:
    """Two-stage rankings: each query's first `rerank` first-stage candidates ordered by the re-ranker's
    scores (flat, in `rerank_pairs` order), then the rest of the first stage's list as it was.

    A relevant document the first stage did not return is never ranked: two-stage retrieval misses it.
    """
    assert rset.first_stage is not None
    rankings, start = [], 0
    for row, candidates in enumerate(rset.first_stage):
        top, rest = candidates[:rerank], candidates[rerank:]
        scores = pair_scores[start : start + len(top)]
        start += len(top)
        rankings.append((rank_against_query(top, scores, rset.relevant[row], complete=True) + rest)[:depth])
    return rankings


def rerank_pairs(rset: RetrievalSet, rerank: int) -> tuple[list[str], list[str]]:
    """(query, candidate) texts of each query's first `rerank` first-stage candidates, query by query."""
    assert rset.first_stage is not None
    queries, documents = [], []
    for row, candidates in enumerate(rset.first_stage):
        queries += [rset.query_texts[row]] * len(candidates[:rerank])
        documents += [rset.candidate_texts[i] for i in candidates[:rerank]]
    return queries, documents


def evaluate_model(model: object, rset: RetrievalSet, cfg: RetrievalValidationConfig,
                   encode: Optional[Callable[[Sequence[str]], np.ndarray]] = None,
                   score: Optional[Callable[[Sequence[str], Sequence[str]], np.ndarray]] = None) -> dict[str, np.ndarray]:
    """Per-query metrics of a bi-encoder (`encode`: texts -> normalised vectors) or a re-ranker (`score`).

    `model` is an `Encoder` or a `CrossEncoder`; `encode`/`score` replace its own methods (e.g. by a
    version that shards the texts over training workers).
    """
    from lmplatform.models.cross_encoder import CrossEncoder

    if isinstance(model, CrossEncoder):
        score = score or (lambda q, d: model.score(q, d, batch_size=cfg.batch_size))
        pair_scores = np.asarray(score(*rerank_pairs(rset, cfg.candidates)))
        return score_rankings(reranked_rankings(pair_scores, rset, cfg.depth(), cfg.candidates), rset, cfg)
    encode = encode or (lambda texts: model.encode(texts, batch_size=cfg.batch_size))  # type: ignore[attr-defined]
    vectors = encode([*rset.query_texts, *rset.candidate_texts])
    queries, candidates = vectors[: len(rset.query_texts)], vectors[len(rset.query_texts) :]
    metrics = score_rankings(dense_rankings(queries, candidates, rset, cfg.depth()), rset, cfg)
    if cfg.hybrid is not None:
        fused = hybrid_rankings(queries @ candidates.T, rset.bm25(), rset, cfg.depth(), cfg.hybrid)
        metrics |= {hybrid_metric_name(name): values for name, values in score_rankings(fused, rset, cfg).items()}
    return metrics


@dataclass
class WeightChoice:
    """`choose_bm25_weight`'s answer: the best weight and every weight's mean metrics (`summarize`)."""

    bm25_weight: float
    metric: str
    per_weight: dict[float, dict[str, float]]


DEFAULT_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))


def choose_bm25_weight(model: Any, rset: RetrievalSet, cfg: RetrievalValidationConfig,
                       weights: Sequence[float] = DEFAULT_WEIGHTS, metric: str = "ir_mrr_at_10",
                       fusion: Optional[FusionSettings] = None) -> WeightChoice:
    """The convex BM25 weight of `weights` whose fused ranking scores best on `metric` over `rset` (a dev set).

    model: an `Encoder` or a model folder / 'default' / models:/ URI; it encodes the set once, BM25 indexes
    the pool once. fusion: the other fusion settings (candidates); its bm25_weight is what varies.
    Ties go to the smaller weight. Weight 0 is the dense ranking of the pool, so include it to compare.
    """
    if metric not in cfg.ranking_metric_names():
        raise ValueError(f"metric {metric!r} is not scored; choose one of {', '.join(cfg.ranking_metric_names())}")
    if not weights or any(not 0.0 <= w <= 1.0 for w in weights):
        raise ValueError(f"weights must be a non-empty list of values in [0, 1], got {list(weights)}")
    if isinstance(model, (str, Path)):
        from lmplatform.models.encoder import Encoder

        model = Encoder.from_pretrained(model)
    vectors = model.encode([*rset.query_texts, *rset.candidate_texts], batch_size=cfg.batch_size)
    queries, candidates = vectors[: len(rset.query_texts)], vectors[len(rset.query_texts) :]
    dense_scores, base = queries @ candidates.T, fusion or FusionSettings()
    per_weight = {}
    for weight in weights:
        settings = base.model_copy(update={"fusion": "convex", "bm25_weight": float(weight)})
        rankings = hybrid_rankings(dense_scores, rset.bm25(), rset, cfg.depth(), settings)
        per_weight[float(weight)] = summarize(score_rankings(rankings, rset, cfg), rset)
    best = max(sorted(per_weight), key=lambda w: per_weight[w][metric])  # max keeps the first (smallest) of equals
    return WeightChoice(best, metric, per_weight)


# -- building the set --------------------------------------------------------------------------------
def read_distractors(cfg: DistractorConfig, clean: bool) -> tuple[list[str], int]:
    """(distinct document texts, rows skipped as unusable) from the distractor files."""
    texts: dict[str, None] = {}
    skipped = 0
    for row in distractor_rows(cfg, clean):
        if row is not None and row[0].strip():
            texts[row[0]] = None
        else:
            skipped += 1
    documents = list(texts)
    if cfg.max_documents is not None and len(documents) > cfg.max_documents:
        documents = random.Random(cfg.seed).sample(documents, cfg.max_documents)
    return documents, skipped


def _stable_order(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def retrieval_set_from_pairs(
    all_pairs: Sequence[Pair], query_pairs: Sequence[Pair], distractors: Sequence[str], cfg: RetrievalValidationConfig,
) -> RetrievalSet:
    """Queries of `query_pairs` ranked against their documents plus `distractors`.

    Relevance 'group': the other texts of the query's group, linked through any of `all_pairs`.
    """
    groups: DuplicateGroups[str] = DuplicateGroups()
    for pair in all_pairs:
        groups.link(pair.query, pair.document)
    candidates: dict[str, int] = {}
    for text in [p.document for p in query_pairs] + list(distractors):
        candidates.setdefault(text, len(candidates))
    members: dict[str, list[int]] = defaultdict(list)
    for text, index in candidates.items():
        if text in groups:
            members[groups.find(text)].append(index)
    own: dict[str, set[int]] = defaultdict(set)
    for pair in query_pairs:
        own[pair.query].add(candidates[pair.document])
    queries = sorted(own, key=_stable_order)
    if cfg.max_queries is not None:
        queries = queries[: cfg.max_queries]
    query_texts, relevant, excluded = [], [], []
    self_matches = 0
    for query in queries:
        itself = {candidates[query]} if query in candidates else set()
        related = set(members[groups.find(query)]) if cfg.relevance == "group" else set(own[query])
        related -= itself
        if not related:  # e.g. the query's only document is its own text
            continue
        self_matches += bool(itself)
        query_texts.append(query)
        relevant.append(frozenset(related))
        excluded.append(frozenset(itself))
    counts = {
        "queries": len(query_texts), "queries_without_relevant": len(queries) - len(query_texts),
        "candidates": len(candidates), "distractors": len(distractors), "queries_in_pool": self_matches,
    }
    return RetrievalSet(query_texts, list(candidates), relevant, excluded, counts)


def online_set_from_pairs(
    all_pairs: Sequence[Pair], query_pairs: Sequence[Pair], distractors: Sequence[str],
    times: Mapping[str, Optional[float]], cfg: RetrievalValidationConfig,
) -> RetrievalSet:
    """The online protocol's set: the pool of `retrieval_set_from_pairs` (the pairs' documents plus `distractors`),
    its texts on a `Timeline` by `times` (text -> epoch seconds or None; its order breaks ties of equal times), the
    groups linked through any of `all_pairs`. Queries: of each of `query_pairs`, the later-filed end when it is a
    protocol query (`evaluation.online.later_ends`), the `max_queries` first in stable hash order. Each query's
    excluded candidates are those outside `online.candidate_mask` (not filed before it within `cfg.window_days`);
    its relevant ones are the other members of its group in the pool (ranked only when in the window)."""
    groups: DuplicateGroups[str] = DuplicateGroups()
    for pair in all_pairs:
        groups.link(pair.query, pair.document)
    candidates = list(dict.fromkeys([p.document for p in query_pairs] + list(distractors)))
    texts = list(dict.fromkeys([*candidates, *(t for p in query_pairs for t in (p.query, p.document))]))
    first_row = {text: n for n, text in enumerate(times)}
    texts.sort(key=lambda t: first_row.get(t, len(first_row)))  # stable: texts in no file keep their order, last
    timeline = Timeline(texts, [times.get(t) for t in texts], [groups.find(t) if t in groups else None for t in texts])
    positions = np.array(timeline.indices(candidates), dtype=np.int64)
    buckets = timeline.bucket_of[positions]
    queries = later_ends(timeline, [(p.query, p.document) for p in query_pairs])
    queries = sorted(queries, key=lambda q: _stable_order(timeline.ids[q]))
    if cfg.max_queries is not None:
        queries = queries[: cfg.max_queries]
    query_texts, relevant, excluded = [], [], []
    for q in queries:
        query_texts.append(timeline.ids[q])
        inside = candidate_mask(timeline, q, cfg.window_days)[positions]
        excluded.append(MaskSet(~inside))
        relevant.append(frozenset(np.flatnonzero((buckets == timeline.bucket_of[q]) & (positions != q)).tolist()))
    without_earlier = sum(not any(i not in e for i in r) for r, e in zip(relevant, excluded))
    counts = {
        "queries": len(query_texts), "candidates": len(candidates), "distractors": len(distractors),
        "queries_without_earlier_relevant": without_earlier, "unknown_time": timeline.unknown_time,
        "pairs_without_query": sum(not later_ends(timeline, [(p.query, p.document)]) for p in query_pairs),
    }
    return RetrievalSet(query_texts, candidates, relevant, excluded, counts, buckets=buckets)


def build_retrieval_set(cfg: RetrievalValidationConfig, run_data: Optional[DataConfig] = None) -> RetrievalSet:
    """Read the pairs (the run's own data unless `cfg.pairs` names others) and distractors into a set."""
    data = cfg.pairs or run_data
    if data is None:
        raise DataError("retrieval_validation needs pairs: set retrieval_validation.pairs")
    pairs = read_pairs(data)
    queries = pairs.validation if cfg.split == "validation" else pairs.train + pairs.validation
    if not queries:
        raise DataError(
            f"retrieval_validation: no {cfg.split} pairs in {', '.join(data.train_paths + data.validation_paths)} "
            "(set validation_paths or a validation_fraction above 0, or split: all)"
        )
    distractors, skipped = read_distractors(cfg.distractors, data.clean) if cfg.distractors else ([], 0)
    if cfg.protocol == "online":
        assert cfg.distractors is not None  # the config's validator
        times, junk = text_times(cfg.distractors, data.clean, cfg.time_field)
        rset = online_set_from_pairs(pairs.train + pairs.validation, queries, distractors, times, cfg)
        rset.counts["junk_time"] = junk
    else:
        rset = retrieval_set_from_pairs(pairs.train + pairs.validation, queries, distractors, cfg)
    rset.counts["distractor_rows_skipped"] = skipped
    return rset


def prepare_retrieval_set(cfg: RunConfig) -> Optional[RetrievalSet]:
    """The run's corpus-level validation set (driver side), or None when it configures none."""
    rv = cfg.retrieval_validation
    if rv is None:
        return None
    rset = build_retrieval_set(rv, cfg.data)
    return attach_first_stage(rset, rv) if objective_spec(cfg.objective.name).model_kind == CROSS_ENCODER else rset


def attach_first_stage(rset: RetrievalSet, cfg: RetrievalValidationConfig) -> RetrievalSet:
    """Give each query the first-stage retriever's ranking, deep enough for every cut-off and for the
    `cfg.candidates` a re-ranker re-orders (cross-encoder validation)."""
    retriever = (BM25Retriever() if cfg.first_stage == "bm25"
                 else DenseRetriever.from_pretrained(cfg.first_stage, batch_size=cfg.batch_size))
    ids = [str(i) for i in range(len(rset.candidate_texts))]
    retriever.index(ids, rset.candidate_texts)
    exclude = [{str(i) for i in e} for e in rset.excluded]
    hits = retriever.search(rset.query_texts, min(max(cfg.candidates, cfg.depth()), len(ids)), exclude=exclude)
    rset.first_stage = [[int(doc) for doc, _ in row] for row in hits]
    found = sum(bool(set(row[: cfg.candidates]) & rel) for row, rel in zip(rset.first_stage, rset.relevant))
    rset.counts["first_stage_queries_with_a_relevant"] = found
    return rset


class CorpusRetrievalValidator:
    """`validator(model) -> {ir_*: mean}` inside training: every worker encodes (or scores) a shard of
    the texts, gathers the rest, and ranks every query against the whole pool. Call it on every worker."""

    def __init__(self, rset: RetrievalSet, cfg: RetrievalValidationConfig, view: Callable[[object], object]):
        self.rset, self.cfg, self.view = rset, cfg, view

    def __call__(self, model: object) -> dict[str, float]:
        from lmplatform.train.distributed import map_sharded

        ranker = self.view(model)
        size = self.cfg.batch_size
        per_query = evaluate_model(
            ranker, self.rset, self.cfg,
            encode=lambda texts: map_sharded(lambda part: ranker.encode(part, batch_size=size), texts),  # type: ignore[attr-defined]
            score=lambda q, d: map_sharded(
                lambda part: ranker.score([a for a, _ in part], [b for _, b in part], batch_size=size),  # type: ignore[attr-defined]
                list(zip(q, d))),
        )
        return summarize(per_query, self.rset)
