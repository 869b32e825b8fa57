"""Jira's CSV export: one issue a row (a description may span lines), columns that repeat (Component/s,
Affects Version/s, Labels, one "Outward issue link (Duplicate)" column per link) all read."""
from __future__ import annotations

import csv
import io
import re
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from lmplatform.data.readers import DataError
from lmplatform.data.trackers.jsonfiles import read_text
from lmplatform.data.trackers.records import ReadResult, SourceRecord
from lmplatform.data.trackers.values import id_text

EXPECTED = "jira-csv: Jira's CSV export, whose header names 'Summary' and 'Issue key' (or 'Issue id')"
_LINK_COLUMN = re.compile(r"(?i)\s*(?:inward|outward) issue link \((?P<type>.+)\)\s*")
_KEY_SEPARATORS = re.compile(r"[,;\s]+")


def read_jira_csv(paths: Sequence[str]) -> ReadResult:
    """Every row of every file. A row whose cells do not match the header is skipped with its line; a file
    whose header is not Jira's is a DataError."""
    result = ReadResult()
    for path in paths:
        with _long_fields():
            _read_file(path, result)
    return result


def _read_file(path: str, result: ReadResult) -> None:
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = [name.strip() for name in next(reader, [])]
        lowered = {name.lower() for name in header}
        if "summary" not in lowered or not {"issue key", "issue id"} & lowered:
            raise DataError(f"{path}: not {EXPECTED} (header: {header[:8]})")
        repeated = {name for name, count in Counter(header).items() if count > 1}
        link_columns = [i for i, name in enumerate(header) if (m := _LINK_COLUMN.fullmatch(name))
                        and "duplicat" in m.group("type").lower()]
        key_column = _column(header, "Issue key")
        id_column = _column(header, "Issue id")
        start = reader.line_num + 1
        for row in reader:
            where, start = f"{path}:{start}", reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            result.rows += 1
            if len(row) != len(header):
                result.skip("cells do not match the header", where, f"{len(row)} cells, the header has {len(header)}")
                continue
            raw: dict[str, Any] = {}
            for name, cell in zip(header, row):
                if name in repeated:
                    raw.setdefault(name, [])
                    if cell.strip():
                        raw[name].append(cell)
                else:
                    raw[name] = cell
            aliases = [a for a in (id_text(row[key_column]) if key_column is not None else None,
                                   id_text(row[id_column]) if id_column is not None else None) if a]
            links = [key for i in link_columns for key in _KEY_SEPARATORS.split(row[i].strip()) if key]
            result.records.append(SourceRecord(where, raw, aliases, links))
    except csv.Error as exc:  # a NUL byte, an unclosed quote at the end: the rest of the file cannot be read
        raise DataError(f"{path}:{reader.line_num}: not readable as CSV ({exc}); expected {EXPECTED}") from None


def _column(header: list[str], name: str) -> Optional[int]:
    return next((i for i, column in enumerate(header) if column.lower() == name.lower()), None)


@contextmanager
def _long_fields() -> Iterator[None]:
    """Descriptions with stack traces pass csv's 128 KiB default field limit; the limit is global, so it is
    put back after."""
    before = csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(before)
