"""Read duplicate-report datasets into (queries, corpus, qrels) for a retrieval scenario (`online_data` reads them
into a timeline and its queries for the online protocol), or into
training pairs (`training_pairs`; `write_split_pairs` writes them per split, behind `lmp data pairs`).

Works for any JSONL corpus of reports plus JSONL duplicate relations (pairs or
undirected links); see `RetrievalDataset`. Bad rows (not JSON, not an object, not valid Unicode)
are skipped and counted with file and line; relations pointing at unknown reports are skipped and counted.
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from lmplatform.data.fields import join_fields
from lmplatform.data.groups import DuplicateGroups
from lmplatform.data.readers import BadRow, DataError, read_rows
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset, RetrievalScenario

logger = logging.getLogger(__name__)


@dataclass
class RetrievalData:
    name: str
    reports: dict[str, dict[str, Any]]
    query_fields: dict[str, dict[str, Any]]  # query id -> fields the query text is built from
    related: dict[str, set[str]]  # query id -> directly related report ids (this split)
    groups: dict[str, set[str]]  # any id -> its duplicate group (all splits)
    targets: set[str]  # every report that is the target of some relation (the "primaries")
    counts: dict[str, int] = field(default_factory=dict)
    bad_rows: list[str] = field(default_factory=list)


@dataclass
class ScenarioInputs:
    query_ids: list[str]
    query_texts: list[str]
    corpus_ids: list[str]
    corpus_texts: list[str]
    qrels: dict[str, set[str]]
    exclude: list[set[str]]


def _not_unicode(fields: dict[str, Any]) -> Optional[str]:
    """Why a row's text is not valid Unicode, if it is not. A JSON \\uD800-\\uDFFF escape without its other
    half parses to a lone surrogate, which no UTF-8 file (the pair files) nor tokenizer takes."""
    try:
        json.dumps(fields, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid Unicode (lone surrogate U+{ord(exc.object[exc.start]):04X})"
    return None


def _rows(path: str, bad: list[str]) -> list[dict[str, Any]]:
    if not Path(path).is_file():
        raise DataError(f"file not found: {path}")
    out = []
    for row in read_rows(path, "jsonl"):
        if isinstance(row, BadRow):
            bad.append(str(row))
        elif (reason := _not_unicode(row.fields)) is not None:
            bad.append(str(BadRow(row.path, row.line, reason)))
        else:
            out.append(row.fields)
    return out


def _is_duplicate(value: Any) -> bool:
    return str(value or "").strip().lower() == "duplicate"


def load_retrieval_data(ds: RetrievalDataset) -> RetrievalData:
    bad: list[str] = []
    counts: dict[str, int] = defaultdict(int)
    reports: dict[str, dict[str, Any]] = {}
    for fields in _rows(ds.corpus, bad):
        if ds.id_field not in fields:
            counts["reports_without_id"] += 1
            continue
        doc_id = str(fields[ds.id_field])
        if doc_id in reports:
            counts["reports_duplicate_id"] += 1
            continue
        reports[doc_id] = fields
    relations = _rows(ds.relations, bad)

    # Groups span all splits: a report related to the query through training pairs is still a duplicate.
    linked: DuplicateGroups[str] = DuplicateGroups()
    directed: list[tuple[str, str, dict[str, Any]]] = []
    targets: set[str] = set()
    for row in relations:
        if ds.query_id_field not in row or ds.target_id_field not in row:
            counts["relations_missing_field"] += 1
            continue
        a, b = str(row[ds.query_id_field]), str(row[ds.target_id_field])
        linked.link(a, b)
        in_split = ds.split is None or ds.split_field is None or str(row.get(ds.split_field)) == ds.split
        if ds.format == "pairs":
            pairs = [(a, b)]
        else:
            dup_a = dup_b = False
            if ds.resolution_fields:
                dup_a, dup_b = (_is_duplicate(row.get(f)) for f in ds.resolution_fields)
            pairs = [(a, b)] if dup_a and not dup_b else [(b, a)] if dup_b and not dup_a else [(a, b), (b, a)]
        targets.update(t for _, t in pairs)
        if in_split:
            directed.extend((q, t, row) for q, t in pairs)

    groups = linked.members()

    query_fields: dict[str, dict[str, Any]] = {}
    related: dict[str, set[str]] = defaultdict(set)
    for query, target, row in directed:
        if target not in reports:
            counts["relations_unknown_target"] += 1
            continue
        if ds.query_text_source == "corpus":
            if query not in reports:
                counts["relations_unknown_query"] += 1
                continue
            query_fields[query] = reports[query]
        else:
            query_fields.setdefault(query, row)
        related[query].add(target)
    query_ids = list(query_fields)
    if ds.limit_queries:
        query_ids = query_ids[: ds.limit_queries]
    counts.update(reports=len(reports), relations=len(relations), queries=len(query_ids), bad_rows=len(bad))
    if bad:
        logger.warning("%s: skipped %d bad rows, e.g. %s", ds.name, len(bad), bad[0])
    if not query_ids:
        raise DataError(f"dataset {ds.name!r}: no query left for split={ds.split!r} (counts: {dict(counts)})")
    return RetrievalData(
        ds.name, reports, {q: query_fields[q] for q in query_ids}, {q: related[q] for q in query_ids},
        groups, targets, dict(counts), bad,
    )


def scenario_inputs(data: RetrievalData, ds: RetrievalDataset, scenario: RetrievalScenario) -> ScenarioInputs:
    """Build query texts, the searched corpus, relevance sets and per-query exclusions for one scenario."""
    corpus_ids = [d for d in data.reports if scenario.corpus_scope == "all" or d in data.targets]
    corpus_texts = [join_fields(data.reports[d], scenario.corpus_fields) for d in corpus_ids]
    # A document with none of the corpus fields cannot be matched on text; keep it so the corpus stays whole.
    in_corpus = set(corpus_ids)
    qrels: dict[str, set[str]] = {}
    query_ids, query_texts, exclude = [], [], []
    for q, fields in data.query_fields.items():
        if ds.relevance == "group":
            relevant = set(data.groups.get(q, set())) - {q}
        else:
            relevant = set(data.related[q])
        qrels[q] = relevant & in_corpus  # may be empty: the metrics skip and count such queries
        query_ids.append(q)
        query_texts.append(join_fields(fields, scenario.query_fields))
        exclude.append({q} if scenario.exclude_query else set())
    empty_texts = sum(1 for t in query_texts if not t)
    if empty_texts == len(query_texts):
        raise DataError(f"dataset {ds.name!r}, scenario {scenario.name!r}: every query text is empty; "
                        f"check query_fields={scenario.query_fields}")
    if not any(corpus_texts):
        raise DataError(f"dataset {ds.name!r}, scenario {scenario.name!r}: every document text is empty; "
                        f"check corpus_fields={scenario.corpus_fields}")
    return ScenarioInputs(query_ids, query_texts, corpus_ids, corpus_texts, qrels, exclude)


def training_pairs(data: RetrievalData, fields: list[str]) -> tuple[list[dict[str, str]], int]:
    """One (query, document, group) row per relation of the split, texts joined from `fields`, and how many
    relations were left out because either text is empty.

    `group` is the duplicate group over *all* splits (its smallest report id), so that group-aware batches
    and the mine stage also keep apart duplicates that are linked only through another split's relations.
    """
    rows, empty = [], 0
    for query_id, targets in data.related.items():
        query = join_fields(data.query_fields[query_id], fields)
        for target in sorted(targets):
            document = join_fields(data.reports[target], fields)
            if not query or not document:
                empty += 1
                continue
            rows.append({"query": query, "document": document, "group": min(data.groups[query_id])})
    return rows, empty


@dataclass(frozen=True)
class SplitPairs:
    path: Path
    pairs: int
    groups: int  # distinct duplicate groups among the pairs written
    empty: int  # relations left out because the query's or the document's text is empty
    bad_rows: list[str]  # rows of the corpus or relations file skipped, each with its file and line


def write_split_pairs(dataset: RetrievalDataset, out: Path, fields: Sequence[str],
                      splits: Sequence[str] = ("train", "dev", "test"), limit: Optional[int] = None) -> dict[str, SplitPairs]:
    """`out/<split>.jsonl` for each split: the `training_pairs` of `dataset` (its name and split are set per
    split), the first `limit` of them when given. Raises DataError on the first split that cannot be read;
    the earlier splits' files are written by then."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for split in splits:
        data = load_retrieval_data(dataset.model_copy(update={"name": split, "split": split}))
        rows, empty = training_pairs(data, list(fields))
        rows = rows[:limit]
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        written[split] = SplitPairs(path, len(rows), len({row["group"] for row in rows}), empty, data.bad_rows)
    return written
