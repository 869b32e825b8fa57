"""Plain JSONL reports, one object a line (the project's own corpora: OpenOffice, Hadoop, SeaMonkey), and the
JSONL links files any format may add: pairs {"duplicate_id", "master_id"} or undirected {"id_a", "id_b"}."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from lmplatform.data.readers import BadRow, DataError, read_rows
from lmplatform.data.trackers.jsonfiles import check_some_read
from lmplatform.data.trackers.records import ReadResult, SourceRecord, Tally
from lmplatform.data.trackers.values import id_text

EXPECTED = "jsonl: one JSON object (a report) a line"
LINK_FIELDS = (("duplicate_id", "master_id"), ("id_a", "id_b"))


def read_jsonl(paths: Sequence[str]) -> ReadResult:
    """Every object of every file; a line that is not one is skipped with its line."""
    result = ReadResult()
    for path in paths:
        rows = shaped = 0
        first_reason = ""
        for row in read_rows(path, "jsonl"):
            rows += 1
            result.rows += 1
            if isinstance(row, BadRow):
                first_reason = first_reason or str(row)
                result.skip(row.reason.split(" (")[0], f"{path}:{row.line}", row.reason)
                continue
            shaped += 1
            result.records.append(SourceRecord(f"{path}:{row.line}", row.fields))
        check_some_read(path, rows, shaped, first_reason, EXPECTED)
    return result


@dataclass
class LinkRows:
    """The links of links files: (one id, the other id, where), and the rows that are not links."""

    links: list[tuple[str, str, str]] = field(default_factory=list)
    rows: int = 0
    skipped: Tally = field(default_factory=Tally)


def read_link_files(paths: Sequence[str], fields: Optional[tuple[str, str]] = None) -> LinkRows:
    """Every link of every JSONL links file: the two ids of `fields`, or of the first of `LINK_FIELDS` a row has.
    Direction is not kept: the earliest report of a group is its master whichever way a row points."""
    result = LinkRows()
    candidates = (fields,) if fields else LINK_FIELDS
    for path in paths:
        rows = shaped = 0
        first_reason = ""
        for row in read_rows(path, "jsonl"):
            rows += 1
            result.rows += 1
            if isinstance(row, BadRow):
                first_reason = first_reason or str(row)
                result.skipped.add(row.reason.split(" (")[0], str(row))
                continue
            shaped += 1
            pair = next(((row.fields[a], row.fields[b]) for a, b in candidates if a in row.fields and b in row.fields), None)
            if pair is None:
                names = " or ".join(f"{a}/{b}" for a, b in candidates)
                result.skipped.add("no link fields", f"{path}:{row.line}: no {names}")
                continue
            a, b = id_text(pair[0]), id_text(pair[1])
            if a is None or b is None:
                result.skipped.add("empty link id", f"{path}:{row.line}: a link id is missing or empty")
                continue
            result.links.append((a, b, f"{path}:{row.line}"))
        if rows and not shaped:
            raise DataError(f"{path}: none of its {rows} line(s) is a JSON object (e.g. {first_reason}); expected a "
                            "JSONL links file of {\"duplicate_id\", \"master_id\"} or {\"id_a\", \"id_b\"} rows")
    return result
