"""Retrieval validation in the online protocol (`RetrievalValidationConfig.protocol: online`; the protocol itself:
`evaluation.online`).

A validation set's texts are placed on a `Timeline` by the time their row in the distractor files gives (the first row
of a text; file order breaks ties of equal times). A query is the later-filed end of a validation pair when it is a
protocol query (known time, in a duplicate group, not the group's earliest member). Its candidates are the pool's
texts filed before it within the window: every other candidate is *excluded* (`MaskSet`), so every ranking the
validation makes (dense, hybrid, metadata fusion, re-ranked) ranks only them, exactly as the corpus protocol's
excluded texts. Candidates of one duplicate group are one bucket; `bucket_rank_of` turns a ranking into the relevant
bucket's rank (ties already count against the query: `rank_against_query` puts non-relevant candidates first at
equal scores) and `online_metrics` into per-query metrics.
"""
from __future__ import annotations

import math
from collections.abc import Set
from typing import Iterator, Optional, Sequence

import numpy as np

from lmplatform.evaluation.distractors import distractor_rows
from lmplatform.evaluation.online import report_time
from lmplatform.retrieval.settings import DistractorConfig, RetrievalValidationConfig


class MaskSet(Set):
    """The set of indices i where mask[i] (bool [n]), without a Python int per member: a query's excluded
    candidates under the online protocol (most of the pool)."""

    def __init__(self, mask: np.ndarray):
        self.mask = np.asarray(mask, dtype=bool)

    def __contains__(self, index: object) -> bool:
        try:
            i = int(index)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return False
        return 0 <= i < len(self.mask) and bool(self.mask[i])

    def __iter__(self) -> Iterator[int]:
        return iter(np.flatnonzero(self.mask).tolist())

    def __len__(self) -> int:
        return int(np.count_nonzero(self.mask))


def text_times(cfg: DistractorConfig, clean: bool, time_field: str) -> tuple[dict[str, Optional[float]], int]:
    """({document text: epoch seconds or None}, values of `time_field` that are junk) over every row of the
    distractor files (all of them, not the `max_documents` sample), in file order; the first row of a text wins.
    Texts are joined and cleaned as `read_distractors` joins them, so they match the set's texts."""
    times: dict[str, Optional[float]] = {}
    junk = 0
    for row in distractor_rows(cfg, clean):
        if row is not None and row[0].strip() and row[0] not in times:
            times[row[0]], bad = report_time(row[1], time_field)
            junk += bad
    return times, junk


def bucket_rank_of(ranking: Sequence[int], relevant: Set, buckets: np.ndarray) -> Optional[int]:
    """The rank of the relevant bucket in a ranking of candidates (best first, ties already against the query):
    1 + the distinct buckets of the candidates ranked before the first relevant one; None when no relevant candidate
    is ranked (none in the window, or none within the ranking's depth)."""
    seen: set[int] = set()
    for candidate in ranking:
        if candidate in relevant:
            return len(seen) + 1
        seen.add(int(buckets[candidate]))
    return None


def online_metrics(ranks: Sequence[Optional[int]], cfg: RetrievalValidationConfig) -> dict[str, np.ndarray]:
    """Per-query metrics [queries] of bucket ranks (None: a miss at every cut-off), named as
    `cfg.ranking_metric_names()` names them: ir_rr_at_<k> (1 if rank <= k), ir_mrr_at_<mrr_k> (1/rank if
    rank <= mrr_k, else 0), ir_map_at_<map_k> (1/rank if rank <= map_k: one relevant bucket, so AP is 1/rank)."""
    r = np.array([math.inf if rank is None else rank for rank in ranks], dtype=np.float64)
    out = {f"ir_rr_at_{k}": (r <= k).astype(np.float64) for k in cfg.recall_ks}
    out[f"ir_mrr_at_{cfg.mrr_k}"] = np.where(r <= cfg.mrr_k, 1.0 / r, 0.0)
    out[f"ir_map_at_{cfg.map_k}"] = np.where(r <= cfg.map_k, 1.0 / r, 0.0)
    return out
