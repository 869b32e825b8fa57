"""One source record -> one report in the project's schema, by the format's defaults and the config's mapping:
{"id", "title", "description", "product", "component", "created", ...metadata}. Times are read by
`data.fields.parse_time` and written as ISO 8601 UTC; one that does not parse leaves "" and is counted, never
dropped in silence."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from lmplatform.data.fields import EpochUnit, iso_utc, parse_time
from lmplatform.data.readers import DataError
from lmplatform.data.trackers.config import CORE_FIELDS, TrackerImportConfig
from lmplatform.data.trackers.formats import FormatSpec
from lmplatform.data.trackers.records import EXAMPLES, SourceRecord
from lmplatform.data.trackers.values import id_text, lookup, metadata_name, not_unicode, simplify, text


@dataclass(frozen=True)
class FieldMapping:
    """Where each report field comes from (see `FormatSpec`), after the config's overrides."""

    spec: FormatSpec
    core: dict[str, Optional[str]]
    extra: dict[str, str]
    metadata: Optional[frozenset[str]]  # None: every other scalar field
    dates: frozenset[str]
    mapped: frozenset[str]  # metadata names the config's mapping adds: kept whatever `metadata` says
    epoch_unit: EpochUnit = "auto"

    @classmethod
    def of(cls, spec: FormatSpec, cfg: TrackerImportConfig) -> FieldMapping:
        core = dict(spec.core)
        extra = dict(spec.extra)
        for name, path in cfg.mapping.items():
            if name in CORE_FIELDS:
                core[name] = path.strip() or None
            else:
                extra[name] = path.strip()
        dates = spec.dates if cfg.date_fields is None else tuple(cfg.date_fields)
        return cls(spec, core, extra, None if cfg.metadata is None else frozenset(cfg.metadata), frozenset(dates),
                   frozenset(name for name in cfg.mapping if name not in CORE_FIELDS), cfg.epoch_unit)


@dataclass
class DateCounts:
    """One time field over all reports: read, missing (no value) and not read, with examples of the latter."""

    known: int = 0
    missing: int = 0
    unparsed: int = 0
    examples: list[str] = field(default_factory=list)

    def merge(self, other: DateCounts) -> None:
        self.known, self.missing, self.unparsed = self.known + other.known, self.missing + other.missing, \
            self.unparsed + other.unparsed
        self.examples.extend(other.examples[: EXAMPLES - len(self.examples)])

    def to_dict(self) -> dict[str, Any]:
        return {"known": self.known, "missing": self.missing, "unparsed": self.unparsed, "examples": self.examples}


@dataclass(frozen=True)
class Report:
    """A report as written (`row`), its created time in whole seconds (None: unknown), and its source record."""

    id: str
    created: Optional[float]
    row: dict[str, Any]
    record: SourceRecord


@dataclass(frozen=True)
class Unusable:
    reason: str
    detail: str


def map_record(record: SourceRecord, mapping: FieldMapping, dates: dict[str, DateCounts]) -> Union[Report, Unusable]:
    """The report of `record`, or why there is none (no id, text that is not valid Unicode). Counts every time
    field into `dates` (the caller's for this record: only those of reports kept are summed)."""
    id_path = mapping.core["id"] or ""
    report_id = id_text(lookup(record.raw, id_path))
    if report_id is None:
        return Unusable("no id", f"{id_path!r} missing or empty")
    row: dict[str, Any] = {"id": report_id}
    for name in ("title", "description", "product", "component"):
        path = mapping.core[name]
        row[name] = text(lookup(record.raw, path)) if path else ""
    created_path = mapping.core["created"]
    created = _time(lookup(record.raw, created_path) if created_path else None, "created", record.where, mapping,
                    dates, count_missing=True)
    row["created"] = iso_utc(created) if created is not None else ""
    for name, value in _metadata(record, mapping).items():
        if name in mapping.dates:
            seconds = _time(value, name, record.where, mapping, dates, count_missing=False)
            value = iso_utc(seconds) if seconds is not None else ""
        row[name] = value
    reason = not_unicode(row)
    if reason is not None:
        return Unusable(reason.split(" (")[0], reason)
    return Report(report_id, created, row, record)


def _time(value: Any, name: str, where: str, mapping: FieldMapping, dates: dict[str, DateCounts],
          count_missing: bool) -> Optional[float]:
    counts = dates.setdefault(name, DateCounts())
    if isinstance(value, str):
        value = value.strip()
    if value is None or value == "":
        counts.missing += count_missing
        return None
    try:
        seconds = parse_time(value, name, epoch_unit=mapping.epoch_unit)
        if seconds is None:
            raise DataError(f"{name}: no time")
        iso_utc(seconds)  # a time datetime cannot write (the year 10000) is not one
    except (DataError, ValueError, OverflowError, OSError) as exc:
        counts.unparsed += 1
        if len(counts.examples) < EXAMPLES:
            counts.examples.append(f"{where}: {exc}" if isinstance(exc, DataError) else f"{where}: {name}: {value!r}: {exc}")
        return None
    counts.known += 1
    return float(math.floor(seconds))


def _metadata(record: SourceRecord, mapping: FieldMapping) -> dict[str, Any]:
    """The metadata of a record: `extra` fields, then every other scalar field of the format's roots not used for
    a report field, named by `metadata_name` (or the format's rename); empty values left out; only the names in
    `mapping.metadata` when it is given."""
    spec = mapping.spec
    used = {path for path in mapping.core.values() if path} | set(mapping.extra.values())
    found: dict[str, Any] = {}
    for name, path in mapping.extra.items():
        value = simplify(lookup(record.raw, path))
        if value is not None and value != "":
            found[name] = value
    for root in spec.roots:
        fields = record.raw if root == "" else lookup(record.raw, root)
        if not isinstance(fields, dict):
            continue
        for key, raw_value in fields.items():
            path = key if root == "" else f"{root}.{key}"
            if (path in used or key in spec.exclude or (root == "" and key in spec.roots)
                    or (spec.exclude_pattern is not None and spec.exclude_pattern.fullmatch(key))):
                continue
            name = spec.renames.get(key) or metadata_name(key)
            value = simplify(raw_value)
            if not name or name in CORE_FIELDS or name in found or value is None or value == "":
                continue
            found[name] = value
    if mapping.metadata is not None:
        found = {name: value for name, value in found.items() if name in mapping.metadata or name in mapping.mapped}
    return found
