"""The duplicate-detection field's online evaluation protocol (Sun et al. 2011, as re-run by SABD and TOSEM-DBRD).

Reports are ordered by filing time. A query is a report that duplicates an *earlier* one: a member of a duplicate
group that is not the group's earliest member. It is ranked against the reports filed before it, within a window
(365 days by default; None: no window), grouped into buckets:

- order: reports are ordered by (created time, position in the timeline); the position breaks ties between equal
  times, so of two reports filed in the same second the one given first counts as filed first
  (`timeline_from_files` keeps the reports file's order). "Earliest member" and "filed before" both use this order.
- candidates of query q: every report j with a known time, j before q in that order, and t_q - t_j <= window
  (inclusive: a report filed exactly `window_days` earlier is a candidate). Reports of unknown time are never
  queries nor candidates (they are counted).
- buckets: a duplicate group restricted to the candidates (a master with its earlier duplicates) is one bucket;
  a report in no group is a bucket of its own. A bucket scores the max of its members' scores (as SABD does) and
  takes one place in the ranking.
- rank: the relevant bucket is the one holding the earlier members of q's group. Its rank is
  1 + |{other buckets b : score(b) >= score(relevant)}|: a tie is counted against the query, so a scorer that
  cannot tell reports apart earns nothing. When no earlier member lies in the window there is no relevant bucket:
  the query still counts, as a miss at every k (its rank is None).
- metrics over queries Q: RR@k = |{q : rank_q <= k}| / |Q|; MRR@k = mean of 1/rank_q where rank_q <= k, else 0;
  MAP = mean of 1/rank_q without cut-off (one relevant bucket per query, so average precision is 1/rank).

The module is numpy only (no torch); the caller's model is a `score_fn` scoring query reports against every report.
"""
from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Optional, Sequence

import numpy as np

from lmplatform.data.fields import SECONDS_PER_DAY, parse_time
from lmplatform.data.groups import DuplicateGroups
from lmplatform.data.readers import BadRow, DataError, read_rows
from lmplatform.metrics.bootstrap import paired_bootstrap

logger = logging.getLogger(__name__)

DEFAULT_KS = (1, 5, 10, 20)
DEFAULT_MRR_KS = (10,)
ScoreFn = Callable[[np.ndarray], np.ndarray]


class Timeline:
    """Reports with their filing time and duplicate group, in the protocol's order.

    ids [n]; created [n] epoch seconds (None or NaN: unknown); groups [n] any hashable group label or None (no
    group). Derived arrays, all indexed by report position:
    - `created` float64 [n], NaN where unknown;
    - `group` int64 [n]: group number (0..n_groups-1), -1 for no group;
    - `order` int64 [m]: the m reports of known time, in protocol order (time, then position);
    - `seq` int64 [n]: each report's place in `order`, -1 where the time is unknown;
    - `bucket_of` int64 [n]: the group number, or n_groups + position for a report in no group;
    - `earliest` int64 [n_groups]: each group's first member in protocol order (-1: no member of known time).
    """

    def __init__(self, ids: Sequence[Any], created: Sequence[Optional[float]], groups: Sequence[Optional[Hashable]],
                 counts: Optional[dict[str, int]] = None):
        self.ids = [str(i) for i in ids]
        if not len(self.ids) == len(created) == len(groups):
            raise ValueError(f"{len(self.ids)} ids, {len(created)} times and {len(groups)} groups: need one of each per report")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("report ids are not unique")
        self.position = {doc: n for n, doc in enumerate(self.ids)}
        self.created = np.array([np.nan if t is None else float(t) for t in created], dtype=np.float64)
        if np.isinf(self.created).any():
            raise ValueError("a created time is infinite")
        numbers: dict[Hashable, int] = {}
        self.group = np.array([-1 if g is None else numbers.setdefault(g, len(numbers)) for g in groups], dtype=np.int64)
        self.n_groups = len(numbers)
        n = len(self.ids)
        known = np.flatnonzero(~np.isnan(self.created))
        self.order = known[np.argsort(self.created[known], kind="stable")]  # stable: ties keep the given order
        self.sorted_times = self.created[self.order]
        self.seq = np.full(n, -1, dtype=np.int64)
        self.seq[self.order] = np.arange(len(self.order))
        self.bucket_of = np.where(self.group >= 0, self.group, self.n_groups + np.arange(n, dtype=np.int64))
        self.earliest = np.full(self.n_groups, -1, dtype=np.int64)
        in_group = self.order[self.group[self.order] >= 0]
        numbers_seen, first = np.unique(self.group[in_group], return_index=True)  # first occurrence in `order`
        self.earliest[numbers_seen] = in_group[first]
        self.counts = {"reports": n, "unknown_time": int(n - len(known)), **(counts or {})}

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def unknown_time(self) -> int:
        return self.counts["unknown_time"]

    def is_query(self, index: int) -> bool:
        """Known time, in a group, and not the group's earliest member."""
        g = self.group[index]
        return bool(self.seq[index] >= 0 and g >= 0 and self.earliest[g] != index)

    def indices(self, ids: Iterable[Any]) -> list[int]:
        """Positions of report ids (KeyError naming an unknown one)."""
        return [self.position[str(i)] for i in ids]


def online_queries(timeline: Timeline, start: Optional[float] = None, end: Optional[float] = None) -> list[int]:
    """The queries filed in [start, end) (epoch seconds; None: unbounded), in protocol order: the reports of known
    time that are in a duplicate group and are not its earliest member."""
    order = timeline.order
    times = timeline.sorted_times
    lo = 0 if start is None else int(np.searchsorted(times, start, side="left"))
    hi = len(order) if end is None else int(np.searchsorted(times, end, side="left"))
    span = order[lo:hi]
    if not timeline.n_groups:
        return []
    groups = timeline.group[span]
    keep = (groups >= 0) & (timeline.earliest[np.maximum(groups, 0)] != span)
    return span[keep].tolist()


def later_ends(timeline: Timeline, pairs: Iterable[tuple[Any, Any]]) -> list[int]:
    """The queries a set of duplicate relations names: of each (a, b) pair, the end filed later (protocol order;
    normally the duplicate), kept when it is a query (`Timeline.is_query`). Ends not in the timeline or of unknown
    time are skipped. Distinct, in protocol order."""
    out: set[int] = set()
    for a, b in pairs:
        ends = [timeline.position.get(str(x)) for x in (a, b) if x is not None]
        ends = [e for e in ends if e is not None and timeline.seq[e] >= 0]
        if ends:
            later = max(ends, key=lambda e: timeline.seq[e])
            if timeline.is_query(later):
                out.add(later)
    return sorted(out, key=lambda e: timeline.seq[e])


def candidate_mask(timeline: Timeline, query_index: int, window_days: Optional[float] = 365.0) -> np.ndarray:
    """bool [reports]: the candidates of a query, the reports of known time filed before it (protocol order)
    with t_query - t_candidate <= window_days · 86400 (None: no window)."""
    hi = int(timeline.seq[query_index])
    if hi < 0:
        raise ValueError(f"report {timeline.ids[query_index]!r} has no known time: it cannot be a query")
    lo = 0
    if window_days is not None:
        since = timeline.created[query_index] - window_days * SECONDS_PER_DAY
        lo = int(np.searchsorted(timeline.sorted_times, since, side="left"))
    mask = np.zeros(len(timeline), dtype=bool)
    mask[timeline.order[lo:hi]] = True
    return mask


def bucket_scores(scores: np.ndarray, mask: np.ndarray, bucket_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(buckets [b], best [b]): the buckets holding a candidate (ascending bucket number) and their score,
    best[i] = max{scores[j] : mask[j], bucket_of[j] = buckets[i]}. scores float [reports], mask bool [reports],
    bucket_of int [reports] (non-negative). O(reports), no loop over reports (np.maximum.at)."""
    scores, mask, bucket_of = np.asarray(scores, dtype=np.float64), np.asarray(mask, dtype=bool), np.asarray(bucket_of)
    if not scores.shape == mask.shape == bucket_of.shape or scores.ndim != 1:
        raise ValueError(f"scores {scores.shape}, mask {mask.shape} and bucket_of {bucket_of.shape} must be one [reports] each")
    members, values = bucket_of[mask], scores[mask]
    if np.isnan(values).any():
        raise ValueError("a candidate's score is NaN")
    if not len(members):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    size = int(members.max()) + 1
    best = np.full(size, -np.inf)
    np.maximum.at(best, members, values)
    present = np.zeros(size, dtype=bool)
    present[members] = True
    buckets = np.flatnonzero(present)
    return buckets, best[buckets]


def bucket_ranking(scores: np.ndarray, mask: np.ndarray, bucket_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(buckets [b], best [b]) best first: each bucket once, scored by its best candidate; equal scores in bucket
    number order (for display; the rank of the relevant bucket counts ties against it, see `relevant_rank`)."""
    buckets, best = bucket_scores(scores, mask, bucket_of)
    order = np.lexsort((buckets, -best))
    return buckets[order], best[order]


def relevant_rank(buckets: np.ndarray, best: np.ndarray, relevant: int) -> Optional[int]:
    """The 1-based rank of bucket `relevant` among (buckets [b], best [b]), ties counted against it:
    1 + |{i : buckets[i] != relevant, best[i] >= best(relevant)}|; None when `relevant` holds no candidate."""
    where = np.flatnonzero(buckets == relevant)
    if not len(where):
        return None
    return int(np.count_nonzero(best >= best[where[0]]))  # counts the relevant bucket itself: the 1 of the formula


def bucket_rank(scores: np.ndarray, mask: np.ndarray, bucket_of: np.ndarray, relevant: int) -> Optional[int]:
    """`relevant_rank` of bucket `relevant` over one query's candidates (see `bucket_scores` for the shapes)."""
    return relevant_rank(*bucket_scores(scores, mask, bucket_of), relevant)


def rank_metrics(ranks: Sequence[Optional[int]], ks: Sequence[int] = DEFAULT_KS,
                 mrr_ks: Sequence[int] = DEFAULT_MRR_KS) -> dict[str, float]:
    """rr@k, mrr@k and map over per-query bucket ranks [q] (None: a miss at every k). See the module's formulas."""
    if not len(ranks):
        raise ValueError("no query: the metrics are undefined")
    r = ranks_array(ranks)
    out = {f"rr@{k}": float(np.mean(r <= k)) for k in ks}
    out.update({f"mrr@{k}": float(np.mean(np.where(r <= k, 1.0 / r, 0.0))) for k in mrr_ks})
    out["map"] = float(np.mean(1.0 / r))  # 1/inf = 0 for a miss
    return out


def ranks_array(ranks: Sequence[Optional[int]]) -> np.ndarray:
    """float64 [q]: the ranks, inf for a miss."""
    return np.array([math.inf if r is None else r for r in ranks], dtype=np.float64)


@dataclass
class OnlineReport:
    """The protocol's metrics over queries, with each query's bucket rank (None: its group has no earlier member
    within the window) so that intervals can be bootstrapped (`metric_interval`, `paired_difference`).

    counts: queries, misses_outside_window, unknown_time (reports of unknown time: neither query nor candidate),
    reports."""

    metrics: dict[str, float]
    counts: dict[str, int]
    query_ids: list[str]
    ranks: list[Optional[int]] = field(repr=False)
    ks: tuple[int, ...] = DEFAULT_KS
    mrr_ks: tuple[int, ...] = DEFAULT_MRR_KS
    window_days: Optional[float] = 365.0

    def values(self, metric: str) -> np.ndarray:
        """float64 [q]: one query's contribution to `metric` (rr@k: 0/1; mrr@k: 1/rank or 0; map: 1/rank)."""
        r = ranks_array(self.ranks)
        name, _, k = metric.partition("@")
        if name == "map" and not k:
            return 1.0 / r
        if name in ("rr", "mrr") and k.isdigit() and int(k) > 0:
            hit = r <= int(k)
            return hit.astype(np.float64) if name == "rr" else np.where(hit, 1.0 / r, 0.0)
        raise ValueError(f"unknown metric {metric!r}: rr@k, mrr@k or map")

    def to_dict(self, per_query: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"metrics": self.metrics, "counts": self.counts, "window_days": self.window_days}
        if per_query:
            out["ranks"] = dict(zip(self.query_ids, self.ranks))
        return out


def evaluate_online(timeline: Timeline, query_indices: Sequence[int], score_fn: ScoreFn, ks: Sequence[int] = DEFAULT_KS,
                    window_days: Optional[float] = 365.0, mrr_ks: Sequence[int] = DEFAULT_MRR_KS,
                    batch_size: int = 64) -> OnlineReport:
    """Score `query_indices` (each a `Timeline.is_query` report) with the protocol.

    score_fn(batch int64 [b]) -> float [b, reports]: each query's score against every report of the timeline (the
    caller's model; a report it does not score may be -inf). It is called with at most `batch_size` queries at a
    time; the evaluator keeps only each query's candidates, buckets them and ranks the relevant bucket.
    """
    if any(k <= 0 for k in (*ks, *mrr_ks)):
        raise ValueError(f"ks and mrr_ks must be positive, got {list(ks)} / {list(mrr_ks)}")
    if window_days is not None and not window_days > 0:
        raise ValueError(f"window_days must be positive or None, got {window_days}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    queries = np.asarray(query_indices, dtype=np.int64)
    if not len(queries):
        raise ValueError("no query to evaluate")
    wrong = [timeline.ids[q] for q in queries if not timeline.is_query(int(q))]
    if wrong:
        raise ValueError(f"{len(wrong)} reports are not queries (unknown time, in no group, or their group's earliest "
                         f"member), e.g. {wrong[:3]}")
    ranks: list[Optional[int]] = []
    for start in range(0, len(queries), batch_size):
        batch = queries[start : start + batch_size]
        scores = np.asarray(score_fn(batch), dtype=np.float64)
        if scores.shape != (len(batch), len(timeline)):
            raise ValueError(f"score_fn returned {scores.shape} for {len(batch)} queries, expected {(len(batch), len(timeline))}")
        for q, row in zip(batch, scores):
            mask = candidate_mask(timeline, int(q), window_days)
            ranks.append(bucket_rank(row, mask, timeline.bucket_of, int(timeline.bucket_of[q])))
    misses = sum(r is None for r in ranks)
    counts = {"queries": len(ranks), "misses_outside_window": misses, "unknown_time": timeline.unknown_time,
              "reports": len(timeline)}
    return OnlineReport(rank_metrics(ranks, ks, mrr_ks), counts, [timeline.ids[q] for q in queries], ranks,
                        tuple(ks), tuple(mrr_ks), window_days)


# -- intervals -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricInterval:
    """A metric's mean over queries (or the mean of a paired difference) and its percentile-bootstrap interval."""

    metric: str
    value: float
    low: float
    high: float
    level: float
    queries: int

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "low": self.low, "high": self.high, "level": self.level,
                "queries": self.queries}


def metric_interval(report: OnlineReport, metric: str, level: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> MetricInterval:
    """`metric` of `report` with its bootstrap interval, queries resampled (`metrics.bootstrap.paired_bootstrap` against 0)."""
    values = report.values(metric)
    mean, low, high = paired_bootstrap(values, np.zeros_like(values), level, resamples, seed)
    return MetricInterval(metric, mean, low, high, level, len(values))


def paired_difference(a: OnlineReport, b: OnlineReport, metric: str, level: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> MetricInterval:
    """metric(a) - metric(b) over the same queries, with the paired bootstrap interval of the difference
    (`metrics.bootstrap.paired_bootstrap`: whole queries resampled, each query's pair kept together)."""
    if a.query_ids != b.query_ids:
        raise ValueError(f"the reports rank different queries ({len(a.query_ids)} vs {len(b.query_ids)}, or another "
                         "order): a paired difference needs the same queries")
    if a.window_days != b.window_days:
        raise ValueError(f"the reports use different windows ({a.window_days} vs {b.window_days} days)")
    gain, low, high = paired_bootstrap(a.values(metric), b.values(metric), level, resamples, seed)
    return MetricInterval(metric, gain, low, high, level, len(a.query_ids))


# -- files ---------------------------------------------------------------------------------------------
def _jsonl(path: str | Path, counts: dict[str, int]) -> Iterable[dict[str, Any]]:
    if not Path(path).is_file():
        raise DataError(f"file not found: {path}")
    for row in read_rows(str(path), "jsonl"):
        if isinstance(row, BadRow):
            counts["bad_rows"] += 1
        else:
            yield row.fields


def report_time(fields: dict[str, Any], time_field: str) -> tuple[Optional[float], bool]:
    """(epoch seconds or None, whether the value was junk): `parse_time`, a value it rejects counted as unknown."""
    try:
        return parse_time(fields.get(time_field), time_field), False
    except DataError:
        return None, True


def timeline_from_files(reports_jsonl: str | Path, pairs_jsonl: str | Path, id_field: str = "id",
                        time_field: str = "created", duplicate_field: str = "duplicate_id",
                        master_field: str = "master_id", group_field: Optional[str] = "group") -> Timeline:
    """The timeline of a reports file (order kept: it breaks ties of equal times) and its duplicate pairs.

    Groups are the connected components of all pairs (every split; `DuplicateGroups`), and the rows naming the same
    `group_field` value are one group too. Times are `parse_time`d; junk counts as unknown (`counts["junk_time"]`).
    Skipped and counted: bad rows, reports without an id or repeating one, pairs missing an end field.
    """
    counts: dict[str, int] = defaultdict(int)
    reports: dict[str, Optional[float]] = {}
    for fields in _jsonl(reports_jsonl, counts):
        if fields.get(id_field) is None:
            counts["reports_without_id"] += 1
            continue
        doc = str(fields[id_field])
        if doc in reports:
            counts["reports_duplicate_id"] += 1
            continue
        reports[doc], junk = report_time(fields, time_field)
        counts["junk_time"] += junk
    links: DuplicateGroups[str] = DuplicateGroups()
    named: dict[str, str] = {}
    for row in _jsonl(pairs_jsonl, counts):
        if row.get(duplicate_field) is None or row.get(master_field) is None:
            counts["pairs_missing_field"] += 1
            continue
        a, b = str(row[duplicate_field]), str(row[master_field])
        links.link(a, b)
        if group_field and row.get(group_field) is not None:
            links.link(a, named.setdefault(str(row[group_field]), a))
        counts["pairs_unknown_report"] += a not in reports or b not in reports
    roots = {doc: links.find(doc) for doc in reports if doc in links}
    sizes = Counter(roots.values())  # a group counts its members among the reports only
    labels = [roots[doc] if sizes[roots.get(doc)] > 1 else None for doc in reports]
    return Timeline(list(reports), list(reports.values()), labels, dict(counts))


def split_queries(timeline: Timeline, pairs_jsonl: str | Path, split: str = "test", split_field: str = "split",
                  duplicate_field: str = "duplicate_id", master_field: str = "master_id") -> list[int]:
    """The queries of a split: `later_ends` of the pair rows whose `split_field` is `split` (their later-filed end,
    normally the duplicate, when it is a query), in protocol order. Evaluate them with `evaluate_online` to score
    "the test split's duplicates" rather than a [start, end) period (`online_queries`)."""
    counts: dict[str, int] = defaultdict(int)
    rows = [(row.get(duplicate_field), row.get(master_field)) for row in _jsonl(pairs_jsonl, counts)
            if str(row.get(split_field)) == split]
    queries = later_ends(timeline, rows)
    logger.info("%s: %d queries from %d pairs of split %r", pairs_jsonl, len(queries), len(rows), split)
    return queries
