"""`import_tracker`: read an export, map its records to reports, link them into duplicate groups, split the pairs,
and write OUT/reports.jsonl, OUT/pairs.jsonl and OUT/import_summary.json.

reports.jsonl: {"id", "title", "description", "product", "component", "created" (ISO 8601 UTC, "" unknown),
  ...metadata}, sorted by created (unknown last), then id.
pairs.jsonl: per group, one row per member other than its master (the earliest member):
  {"duplicate_id", "master_id", "group" (the master), "split"}: the relations `lmp data pairs` reads.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from lmplatform.data.readers import DataError, expand_paths
from lmplatform.data.trackers.config import TrackerImportConfig
from lmplatform.data.trackers.formats import FORMATS
from lmplatform.data.trackers.jsonl import read_link_files
from lmplatform.data.trackers.links import Group, duplicate_groups, report_order
from lmplatform.data.trackers.mapping import DateCounts, FieldMapping, Report, map_record
from lmplatform.data.trackers.records import ReadResult
from lmplatform.data.trackers.splits import SPLITS, group_split, time_split
from lmplatform.data.trackers.summary import ImportSummary

REPORTS, PAIRS, SUMMARY = "reports.jsonl", "pairs.jsonl", "import_summary.json"


def import_tracker(cfg: TrackerImportConfig) -> ImportSummary:
    """Import `cfg.inputs` into `cfg.out`; the summary is also written there. A file in the wrong format, or an
    import that keeps no report, is a DataError naming the file and the format expected."""
    spec = FORMATS[cfg.format]
    inputs = expand_paths(cfg.inputs)
    link_files = expand_paths(cfg.links) if cfg.links else []
    read = spec.read(inputs)
    summary = ImportSummary(cfg.format, inputs, link_files, cfg.out, records_read=read.rows)
    summary.skipped.merge(read.skipped)
    summary.notes.merge(read.notes)

    reports, dates = _reports(read, FieldMapping.of(spec, cfg), summary)
    if not reports:
        raise DataError(f"no report read from {', '.join(inputs)} as {spec.expected} "
                        f"(skipped {summary.skipped.total}: {summary.skipped.to_dict()})")
    summary.dates = {name: counts.to_dict() for name, counts in dates.items()
                     if counts.known + counts.missing + counts.unparsed}

    created = {r.id: r.created for r in reports.values()}
    link_rows = read_link_files(link_files, cfg.link_fields)
    groups, link_counts = duplicate_groups(_links(reports.values(), link_rows.links), _aliases(reports.values()), created)
    summary.links = {"read": link_counts.read, "kept": link_counts.kept, "unknown": link_counts.unknown.to_dict(),
                     "self": link_counts.self_links, "rows_skipped": link_rows.skipped.to_dict()}
    summary.groups = len(groups)
    summary.reports_in_groups = sum(len(g.members) for g in groups)

    assignment = (time_split(groups, created, cfg.fractions) if cfg.split == "time"
                  else group_split(groups, cfg.fractions, cfg.seed))
    for duplicate in assignment.unplaced:
        summary.unplaced.add("created unknown, so it cannot be placed in time", f"{reports[duplicate].record.where}: "
                             f"duplicate {duplicate}")
    summary.split = assignment.rule
    pair_rows = _pair_rows(groups, assignment.split)
    summary.pairs = {name: sum(1 for row in pair_rows if row["split"] == name) for name in SPLITS}

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    summary.files = {"reports": str(out / REPORTS), "pairs": str(out / PAIRS), "summary": str(out / SUMMARY)}
    ordered = sorted(reports.values(), key=lambda r: report_order(r.id, r.created))
    _write_jsonl(out / REPORTS, (r.row for r in ordered))
    _write_jsonl(out / PAIRS, pair_rows)
    (out / SUMMARY).write_text(json.dumps(summary.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def _reports(read: ReadResult, mapping: FieldMapping, summary: ImportSummary) -> tuple[dict[str, Report], dict[str, DateCounts]]:
    """The reports by id: the first of an id kept, a later one skipped."""
    reports: dict[str, Report] = {}
    dates: dict[str, DateCounts] = {}
    for record in read.records:
        record_dates: dict[str, DateCounts] = {}
        report = map_record(record, mapping, record_dates)
        if not isinstance(report, Report):
            summary.skipped.add(report.reason, f"{record.where}: {report.detail}")
            continue
        if report.id in reports:
            summary.skipped.add("duplicate id", f"{record.where}: id {report.id!r} was read before at "
                                                f"{reports[report.id].record.where}")
            continue
        reports[report.id] = report
        for name, counts in record_dates.items():
            dates.setdefault(name, DateCounts()).merge(counts)
        summary.reports_without_text += not (report.row["title"].strip() or report.row["description"].strip())
    summary.reports_kept = len(reports)
    return reports, dates


def _aliases(reports: Iterable[Report]) -> dict[str, str]:
    """Every identifier a link may use -> the report's id; a report's own id wins over another's alias."""
    aliases: dict[str, str] = {}
    reports = list(reports)
    for report in reports:
        for alias in report.record.aliases:
            aliases.setdefault(alias, report.id)
    aliases.update((r.id, r.id) for r in reports)
    return aliases


def _links(reports: Iterable[Report], file_links: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [(r.id, other, r.record.where) for r in reports for other in r.record.links] + file_links


def _pair_rows(groups: list[Group], split: dict[str, str]) -> list[dict[str, Any]]:
    return [{"duplicate_id": d, "master_id": g.master, "group": g.master, "split": split[d]}
            for g in groups for d in g.duplicates if d in split]


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
