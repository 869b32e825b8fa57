"""Row-level readers for JSONL, CSV/TSV, Parquet and plain text (one document per line).

Readers never raise on a bad row: they yield a `BadRow` naming the file and line
(or row number) and the reason, so the caller decides whether to skip or fail.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Union

Format = Literal["jsonl", "csv", "parquet", "text"]
_EXTENSIONS: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


@dataclass(frozen=True)
class Record:
    path: str
    line: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class BadRow:
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


Row = Union[Record, BadRow]


class DataError(ValueError):
    """Input that cannot be read at all (missing file, unknown format, bad row under on_bad_row=fail)."""


def detect_format(path: str | Path, declared: str = "auto") -> Format:
    if declared != "auto":
        return declared  # type: ignore[return-value]
    suffixes = Path(path).suffixes
    ext = suffixes[-2] if suffixes and suffixes[-1] == ".gz" and len(suffixes) > 1 else (suffixes[-1] if suffixes else "")
    return _EXTENSIONS.get(ext.lower(), "text")


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given, folders expanded to the files inside (sorted). Missing paths are an error."""
    files: list[str] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            if not inside:
                raise DataError(f"data folder is empty: {path}")
            files.extend(str(p.resolve()) for p in inside)
        elif path.is_file():
            files.append(str(path.resolve()))
        else:
            raise DataError(f"data file not found: {raw}")
    return files


def _open_text_lines(path: str) -> Iterator[tuple[int, bytes]]:
    opener = _gzip_open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        yield from enumerate(handle, start=1)


def _gzip_open(path: str, mode: str) -> io.BufferedReader:
    return gzip.open(path, mode)  # type: ignore[return-value]


def _decode(path: str, number: int, raw: bytes) -> str | BadRow:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        return BadRow(path, number, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")


def read_rows(path: str, fmt: Format) -> Iterator[Row]:
    """Yield every row of one file as a `Record` or a `BadRow`."""
    if fmt == "jsonl":
        yield from _read_jsonl(path)
    elif fmt == "text":
        yield from _read_text(path)
    elif fmt == "csv":
        yield from _read_csv(path)
    elif fmt == "parquet":
        yield from _read_parquet(path)
    else:
        raise DataError(f"{path}: unknown format {fmt!r}; allowed: jsonl, csv, parquet, text")


def _read_jsonl(path: str) -> Iterator[Row]:
    for number, raw in _open_text_lines(path):
        line = _decode(path, number, raw)
        if isinstance(line, BadRow):
            yield line
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            yield BadRow(path, number, f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            yield BadRow(path, number, f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield Record(path, number, obj)


def _read_text(path: str) -> Iterator[Row]:
    for number, raw in _open_text_lines(path):
        line = _decode(path, number, raw)
        if isinstance(line, BadRow):
            yield line
        else:
            yield Record(path, number, {"text": line})


def _read_csv(path: str) -> Iterator[Row]:
    delimiter = "\t" if ".tsv" in Path(path).suffixes else ","
    decoded: list[tuple[int, str]] = []
    bad: list[BadRow] = []
    for number, raw in _open_text_lines(path):
        line = _decode(path, number, raw)
        if isinstance(line, BadRow):
            bad.append(line)
        else:
            decoded.append((number, line))
    yield from bad
    if not decoded:
        return
    reader = csv.DictReader((text for _, text in decoded), delimiter=delimiter)
    for fields in reader:
        # csv tracks physical lines; map back to the file's numbering (bad lines removed).
        index = min(reader.line_num - 1, len(decoded) - 1)
        number = decoded[index][0]
        if None in fields:
            yield BadRow(path, number, f"more columns than the header ({len(reader.fieldnames or [])})")
            continue
        yield Record(path, number, dict(fields))


def _read_parquet(path: str) -> Iterator[Row]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from exc
    number = 0
    for batch in parquet.iter_batches(batch_size=4096):
        for fields in batch.to_pylist():
            number += 1
            yield Record(path, number, fields)
