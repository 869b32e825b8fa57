"""A duplicate-report dataset as the online protocol (`evaluation.online`) reads it: the timeline of every report,
the queries of the evaluated period, and the searched corpus placed on the timeline. Apart from `data` because it
needs numpy, which `lmp data` (reading pair files through `data`) does not load."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from lmplatform.data.fields import join_fields, parse_time
from lmplatform.data.readers import DataError
from lmplatform.evaluation.online import Timeline, later_ends, online_queries, report_time
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset, RetrievalScenario
from lmplatform.evaluation.tasks.retrieval.data import RetrievalData


@dataclass
class OnlineInputs:
    """What the online protocol (`evaluation.online`) needs for one scenario: the timeline of every report, the
    queries (timeline positions) with their texts, and the searched corpus with each document's timeline position."""

    timeline: Timeline
    queries: list[int]
    query_texts: dict[int, str]
    corpus_ids: list[str]
    corpus_texts: list[str]
    corpus_positions: np.ndarray  # int64 [corpus]: timeline position of each corpus id
    counts: dict[str, int] = field(default_factory=dict)


def report_timeline(data: RetrievalData, time_field: str) -> Timeline:
    """Every report of `data` (file order: it breaks ties of equal times), its `time_field` (junk counts as unknown)
    and its duplicate group over all splits (a group with a single report among the reports is no group)."""
    times, junk = [], 0
    for fields in data.reports.values():
        created, bad = report_time(fields, time_field)
        times.append(created)
        junk += bad
    # `groups` shares one set object per group: its identity is the group's label
    sizes: dict[int, int] = defaultdict(int)
    for doc in data.reports:
        if doc in data.groups:
            sizes[id(data.groups[doc])] += 1
    labels = [id(data.groups[doc]) if doc in data.groups and sizes[id(data.groups[doc])] > 1 else None
              for doc in data.reports]
    return Timeline(list(data.reports), times, labels, {"junk_time": junk})


def online_inputs(data: RetrievalData, ds: RetrievalDataset, scenario: RetrievalScenario) -> OnlineInputs:
    """The online protocol's inputs. Queries: with a split, the later-filed end of each of its relations that is a
    query (`evaluation.online.later_ends`); without one (split or split_field null), every query of the timeline
    (`online_queries`). Either way only those filed in [period_start, period_end), the first `limit_queries`."""
    timeline = report_timeline(data, ds.time_field)
    start, end = parse_time(ds.period_start, "period_start"), parse_time(ds.period_end, "period_end")
    if ds.split is None or ds.split_field is None:
        queries = online_queries(timeline, start, end)[: ds.limit_queries]
        relations_without_query = 0
    else:
        relations = [(q, t) for q, targets in data.related.items() for t in sorted(targets)]
        queries = later_ends(timeline, relations)
        relations_without_query = sum(1 for pair in relations if not later_ends(timeline, [pair]))
        created = timeline.created[queries]
        keep = (created >= (start if start is not None else -np.inf)) & (created < (end if end is not None else np.inf))
        queries = [q for q, k in zip(queries, keep) if k]
    corpus_ids = [d for d in data.reports if scenario.corpus_scope == "all" or d in data.targets]
    corpus_texts = [join_fields(data.reports[d], scenario.corpus_fields) for d in corpus_ids]
    query_texts = {q: join_fields(data.reports[timeline.ids[q]], scenario.query_fields) for q in queries}
    counts = {**timeline.counts, "queries": len(queries), "relations_without_query": relations_without_query}
    if not queries:
        raise DataError(f"dataset {ds.name!r}: no online query (a later-filed duplicate of known time) for "
                        f"split={ds.split!r} in [{ds.period_start}, {ds.period_end}) (counts: {counts})")
    if not any(query_texts.values()):
        raise DataError(f"dataset {ds.name!r}, scenario {scenario.name!r}: every query text is empty; "
                        f"check query_fields={scenario.query_fields}")
    if not any(corpus_texts):
        raise DataError(f"dataset {ds.name!r}, scenario {scenario.name!r}: every document text is empty; "
                        f"check corpus_fields={scenario.corpus_fields}")
    return OnlineInputs(timeline, queries, query_texts, corpus_ids, corpus_texts,
                        np.array(timeline.indices(corpus_ids), dtype=np.int64), counts)
