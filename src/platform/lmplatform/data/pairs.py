"""(query, document) pairs for the supervised objectives, with optional hard negatives.

Rows are read with `readers.read_rows`; a row without a usable query or document
is a `BadRow` (file and line), counted and reported like the corpus reader's. The
train/validation split hashes the query, so every pair of one query lands on the
same side and the split is stable across runs and file order.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional

from lmplatform.config.schema import DataConfig
from lmplatform.data.cleaning import clean_text
from lmplatform.data.corpus import TRAIN, VALIDATION, DataReport, split_of, text_hash
from lmplatform.data.readers import BadRow, DataError, Record, detect_format, expand_paths, read_rows


@dataclass(frozen=True)
class Pair:
    query: str
    document: str
    hard_negatives: tuple[str, ...] = ()
    source: str = ""
    group: Optional[str] = None  # the duplicate group's id, when the data names one (data.group_field)


@dataclass
class PairSet:
    train: list[Pair]
    validation: list[Pair]
    report: DataReport
    hard_negatives: bool = False

    def rows(self, split: str) -> list[dict[str, Any]]:
        pairs = self.train if split == TRAIN else self.validation
        out = []
        for pair in pairs:
            row: dict[str, Any] = {"query": pair.query, "document": pair.document, "source": pair.source}
            if self.hard_negatives:
                row["hard_negatives"] = list(pair.hard_negatives)
            out.append(row)
        return out


def _text(row: Record, name: str, cfg: DataConfig) -> str | BadRow:
    if name not in row.fields:
        available = ", ".join(sorted(map(str, row.fields))) or "none"
        return BadRow(row.path, row.line, f"missing text field {name!r} (fields: {available})")
    value = row.fields[name]
    if value is None:
        return BadRow(row.path, row.line, f"text field {name!r} is null")
    if not isinstance(value, str):
        return BadRow(row.path, row.line, f"text field {name!r} is {type(value).__name__}, not a string")
    text = clean_text(value) if cfg.clean else value
    if len(text.strip()) < cfg.min_chars:
        return BadRow(row.path, row.line, f"empty document in {name!r}" if not text.strip()
                      else f"{name!r} shorter than min_chars={cfg.min_chars}")
    return text


def _hard_negatives(row: Record, cfg: DataConfig) -> tuple[str, ...] | BadRow:
    name = cfg.hard_negative_field
    value = row.fields.get(name) if name else None
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("["):  # CSV cells hold a JSON list
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError:
                return BadRow(row.path, row.line, f"bad hard negatives (field {name!r} starts with '[' but is not a JSON list)")
        else:
            value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return BadRow(row.path, row.line, f"bad hard negatives (field {name!r} must be a text or a list of texts)")
    cleaned = (clean_text(v) if cfg.clean else v for v in value)
    return tuple(v for v in cleaned if v.strip())


def _group(row: Record, cfg: DataConfig) -> Optional[str] | BadRow:
    name = cfg.group_field
    if name is None:
        return None
    value = row.fields.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return BadRow(row.path, row.line, f"missing group id (field {name!r})")
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return BadRow(row.path, row.line, f"bad group id (field {name!r} is {type(value).__name__}, not a text or an integer)")
    return str(value)


def pair_from_row(row: Record | BadRow, cfg: DataConfig) -> Pair | BadRow:
    if isinstance(row, BadRow):
        return row
    query = _text(row, cfg.query_field, cfg)
    if isinstance(query, BadRow):
        return query
    document = _text(row, cfg.document_field, cfg)
    if isinstance(document, BadRow):
        return document
    negatives = _hard_negatives(row, cfg)
    if isinstance(negatives, BadRow):
        return negatives
    group = _group(row, cfg)
    if isinstance(group, BadRow):
        return group
    return Pair(query, document, negatives, f"{row.path}:{row.line}", group)


def pair_split(pair: Pair, cfg: DataConfig) -> str:
    """TRAIN or VALIDATION for a pair of `cfg.train_paths`: a salted hash of its (cleaned) query, so a
    pair lands in the same split in every run, and evaluations can find the pairs training never saw."""
    return split_of(text_hash(pair.query), cfg.seed, cfg.validation_fraction)


def read_pairs(cfg: DataConfig) -> PairSet:
    """Read, validate and split every pair file. Raises DataError on unusable input."""
    fixed = TRAIN if cfg.validation_paths else None
    sources = [(p, fixed) for p in expand_paths(cfg.train_paths)] + [(p, VALIDATION) for p in expand_paths(cfg.validation_paths)]
    report = DataReport(files=[p for p, _ in sources])
    seen: set[int] = set()
    train: list[Pair] = []
    validation: list[Pair] = []
    fingerprint = hashlib.sha256()
    budget = cfg.max_documents
    for path, fixed_split in sources:
        fmt = detect_format(path, cfg.format)
        if fmt == "text":
            raise DataError(f"{path}: pairs need named fields (jsonl, csv or parquet), not plain text")
        with open(path, "rb") as handle:
            fingerprint.update(hashlib.sha256(handle.read()).hexdigest().encode())
        for row in read_rows(path, fmt):
            report.rows_read += 1
            pair = pair_from_row(row, cfg)
            if isinstance(pair, BadRow):
                report.record_bad(pair, cfg.on_bad_row)
                continue
            if cfg.dedup:
                digest = text_hash(pair.query + "\x00" + pair.document)
                if digest in seen:
                    report.duplicates_removed += 1
                    continue
                seen.add(digest)
            if budget is not None and fixed_split != VALIDATION:
                if budget <= 0:
                    report.truncated += 1
                    continue
                budget -= 1
            split = fixed_split or pair_split(pair, cfg)
            (train if split == TRAIN else validation).append(pair)
    report.train_documents, report.validation_documents = len(train), len(validation)
    report.fingerprint = fingerprint.hexdigest()[:16]
    if not train:
        raise DataError(
            f"no usable training pairs in {', '.join(cfg.train_paths)} ({report.rows_read} rows read, "
            f"{report.bad_total} bad; fields query_field={cfg.query_field!r}, document_field={cfg.document_field!r})"
            + (f"; first problem: {report.bad_examples[0]}" if report.bad_examples else "")
        )
    return PairSet(train, validation, report, hard_negatives=cfg.hard_negative_field is not None)


def pair_datasets(pairs: PairSet, rows: Optional[dict[str, list[dict[str, Any]]]] = None) -> dict[str, Any]:
    """Ray datasets {'train', 'validation'} from the pairs (or from given rows per split)."""
    import ray.data

    rows = rows or {split: pairs.rows(split) for split in (TRAIN, VALIDATION)}
    return {split: ray.data.from_items(items) for split, items in rows.items() if items}
