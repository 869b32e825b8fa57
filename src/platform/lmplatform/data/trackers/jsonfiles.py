"""The items of a JSON export whatever its shape: a JSON object holding a list ({"issues": [...]}), a JSON list,
or JSONL (one item a line). Items keep where they came from: the line in JSONL, the position in JSON."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from lmplatform.data.readers import DataError
from lmplatform.data.trackers.records import ReadResult


@dataclass(frozen=True)
class Item:
    """One item of an export; `where` is "file:line" in JSONL and "file: item N" in JSON (readers name it
    better when the item has a key)."""

    path: str
    line: Optional[int]  # JSONL only
    index: int
    value: Any

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else f"{self.path}: item {self.index}"


@dataclass
class JsonDocument:
    path: str
    value: Any  # the parsed JSON, or None for JSONL
    lines: list[tuple[int, Any]]  # JSONL: (line, parsed item)
    bad_lines: list[tuple[int, str]]  # JSONL: (line, why it is not an item)

    def items(self, list_keys: Sequence[str], expected: str) -> list[Item]:
        """The items: each JSONL line, the items of a JSON list, or of the first of `list_keys` that a JSON
        object holds as a list; any other JSON object is one item (a JSONL file of one line). Any other JSON is a
        DataError naming the file and `expected`."""
        if self.value is None:
            return [Item(self.path, line, index, value) for index, (line, value) in enumerate(self.lines, start=1)]
        if isinstance(self.value, list):
            return [Item(self.path, None, index, value) for index, value in enumerate(self.value, start=1)]
        if isinstance(self.value, dict):
            for key in list_keys:
                if isinstance(self.value.get(key), list):
                    return [Item(self.path, None, index, value) for index, value in enumerate(self.value[key], start=1)]
            return [Item(self.path, 1, 1, self.value)]
        raise DataError(f"{self.path}: not {expected} (found a JSON {type(self.value).__name__})")


def read_text(path: str) -> str:
    """A file's text (gzip when it ends in .gz), UTF-8 with or without a byte-order mark. Bytes that are not
    UTF-8 become lone surrogates, so that only the rows holding them are skipped, not the file."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as handle:
        data = handle.read()
    return data.decode("utf-8-sig", errors="surrogateescape")


def read_json_document(path: str, expected: str) -> JsonDocument:
    """A JSON or JSONL file. JSON that does not parse and is not JSONL either is a DataError naming the file and
    `expected`; in JSONL a line that does not parse is kept in `bad_lines` for the reader to count."""
    text = read_text(path)
    if not text.strip():
        return JsonDocument(path, None, [], [])
    try:
        return JsonDocument(path, json.loads(text), [], [])
    except json.JSONDecodeError as whole:
        error = whole
    lines: list[tuple[int, Any]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            lines.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            bad.append((number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
    if not lines:  # neither one JSON document nor lines of JSON
        raise DataError(f"{path}: not JSON or JSONL ({error.msg} at line {error.lineno} column {error.colno}); "
                        f"expected {expected}")
    return JsonDocument(path, None, lines, bad)


def check_some_read(path: str, items: int, shaped: int, first_reason: str, expected: str) -> None:
    """A DataError when a file had items and none had the format's shape: the wrong format, not a few bad rows."""
    if items and not shaped:
        raise DataError(f"{path}: none of its {items} item(s) reads as {expected} (e.g. {first_reason})")


def read_export(path: str, expected: str, result: ReadResult) -> JsonDocument:
    """`read_json_document`, its JSONL lines that do not parse counted in `result` as rows skipped ("not valid
    JSON", with the line and why): what every JSON export reader does first."""
    document = read_json_document(path, expected)
    for line, reason in document.bad_lines:
        result.rows += 1
        result.skip("not valid JSON", f"{path}:{line}", reason)
    return document
