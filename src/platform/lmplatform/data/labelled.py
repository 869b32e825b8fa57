"""Supervised rows (text + label, sentence pairs + score) read from the run's data files.

Labelled sets are small next to pre-training corpora (thousands of rows), so they
are read once on the driver, validated row by row, and handed to Ray Data with
`from_items`. Bad rows are skipped and counted with file and line, or stop the run
under `data.on_bad_row=fail`, exactly like the corpus reader.

Splits: explicit `data.validation_paths` win; else a `split_field` in the rows
(train / dev|validation|val; anything else, e.g. test, is left out); else the
salted text hash of `lmplatform.data.corpus` with `data.validation_fraction`.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from lmplatform.config.schema import DataConfig
from lmplatform.data.corpus import TRAIN, VALIDATION, DataReport, split_of, text_hash
from lmplatform.data.readers import BadRow, DataError, detect_format, expand_paths, read_rows

VALIDATION_NAMES = {"dev", "validation", "val", "valid"}

# Turns one row's fields into an example dict, or returns why the row is unusable.
Extractor = Callable[[dict[str, Any]], Union[dict[str, Any], str]]


@dataclass
class LabelledData(DataReport):
    """The corpus reader's report (counts, bad rows, fingerprint) plus the examples themselves."""

    train: list[dict[str, Any]] = field(default_factory=list)
    validation: list[dict[str, Any]] = field(default_factory=list)
    left_out: int = 0  # rows of other splits (e.g. test) under split_field

    def _sync_counts(self) -> None:
        self.train_documents, self.validation_documents = len(self.train), len(self.validation)

    def metrics(self) -> dict[str, float]:
        self._sync_counts()
        return super().metrics()

    def summary(self) -> str:
        self._sync_counts()
        extra = f"\ndata: {self.left_out} rows of other splits left out (split field)" if self.left_out else ""
        return super().summary() + extra

    def report(self) -> dict[str, Any]:
        return {"files": self.files, "rows_read": self.rows_read, "bad_rows": self.bad_rows,
                "bad_examples": self.bad_examples, "left_out": self.left_out,
                "train": len(self.train), "validation": len(self.validation)}


def read_labelled(cfg: DataConfig, extract: Extractor, split_field: Optional[str] = None,
                  hash_key: str = "text") -> LabelledData:
    """Read every row of the run's files through `extract`; see the module docstring for splits."""
    sources = [(p, None) for p in expand_paths(cfg.train_paths)]
    sources += [(p, VALIDATION) for p in expand_paths(cfg.validation_paths)]
    explicit = bool(cfg.validation_paths)
    data = LabelledData(files=[p for p, _ in sources])
    fingerprint = hashlib.sha256()
    for path, fixed in sources:
        with open(path, "rb") as handle:
            fingerprint.update(hashlib.sha256(handle.read()).digest())
        for row in read_rows(path, detect_format(path, cfg.format)):
            data.rows_read += 1
            example = row if isinstance(row, BadRow) else extract(row.fields)
            if isinstance(example, str):
                example = BadRow(row.path, row.line, example)
            if isinstance(example, BadRow):
                data.record_bad(example, cfg.on_bad_row)
                continue
            example["source"] = f"{path}:{row.line}"
            if fixed is not None:
                split = fixed
            elif explicit:
                split = TRAIN
            elif split_field:
                tag = str(row.fields.get(split_field, "")).lower()
                split = TRAIN if tag == TRAIN else VALIDATION if tag in VALIDATION_NAMES else None
                if split is None:
                    data.left_out += 1
                    continue
            else:
                split = split_of(text_hash(str(example[hash_key])), cfg.seed, cfg.validation_fraction)
            (data.train if split == TRAIN else data.validation).append(example)
            if cfg.max_documents and len(data.train) >= cfg.max_documents and not explicit:
                break
    data.fingerprint = fingerprint.hexdigest()[:16]
    if not data.train:
        raise DataError(
            f"no usable training examples in {', '.join(cfg.train_paths)} ({data.rows_read} rows read, {data.bad_total} bad)"
            + (f"; first problem: {data.bad_examples[0]}" if data.bad_examples else "")
        )
    return data


def labelled_rows(data: LabelledData, columns: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Rows {'train', 'validation'} holding only `columns` of each example."""
    return {split: [{c: ex[c] for c in columns} for ex in examples]
            for split, examples in ((TRAIN, data.train), (VALIDATION, data.validation))}


def labelled_datasets(data: LabelledData, columns: list[str]) -> dict[str, Any]:
    """Ray datasets {'train', 'validation'} of `labelled_rows` (no 'validation' without validation examples)."""
    import ray.data

    return {split: ray.data.from_items(rows) for split, rows in labelled_rows(data, columns).items()
            if rows or split == TRAIN}
