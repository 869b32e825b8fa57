"""A corpus as a Ray Data pipeline, with a pre-flight scan that validates it.

`scan_corpus` reads every file once in parallel Ray tasks and returns counts,
bad rows (file and line), a content fingerprint and the per-file plan: which good
rows to keep (dedup, max_documents) and where each one goes (train/validation).
The texts never reach the driver. `corpus_datasets` then builds lazy Ray Data
datasets that re-read the files on the workers following that plan.

The split is a salted hash of the cleaned text, so it is stable across runs,
machines and file order, and exact duplicates always land on the same side.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np

from lmplatform.config.schema import DataConfig
from lmplatform.data.cleaning import clean_text
from lmplatform.data.readers import BadRow, DataError, Record, detect_format, expand_paths, read_rows

TRAIN, VALIDATION = "train", "validation"
_MAX_BAD_EXAMPLES = 20
_SPLIT_BUCKETS = 1_000_000


@dataclass
class FileScan:
    path: str
    rows: int
    hashes: np.ndarray  # uint64 per good document, in file order
    bad_counts: dict[str, int]
    bad_examples: list[str]
    sha256: str


@dataclass
class FilePlan:
    path: str
    fmt: str
    split: Optional[str]  # None: split by hash; else every kept row goes to this split
    keep: Optional[np.ndarray] = None  # bool mask over good documents; None keeps all


@dataclass
class DataReport:
    files: list[str]
    rows_read: int = 0
    bad_rows: dict[str, int] = field(default_factory=dict)
    bad_examples: list[str] = field(default_factory=list)
    duplicates_removed: int = 0
    truncated: int = 0
    train_documents: int = 0
    validation_documents: int = 0
    fingerprint: str = ""

    @property
    def bad_total(self) -> int:
        return sum(self.bad_rows.values())

    def record_bad(self, row: BadRow, on_bad_row: str) -> None:
        """Count a bad row and keep it as an example, or stop at it under on_bad_row=fail."""
        if on_bad_row == "fail":
            raise DataError(f"bad row (data.on_bad_row=fail): {row}")
        key = reason_key(row.reason)
        self.bad_rows[key] = self.bad_rows.get(key, 0) + 1
        if len(self.bad_examples) < _MAX_BAD_EXAMPLES:
            self.bad_examples.append(str(row))

    def metrics(self) -> dict[str, float]:
        out = {
            "data/rows_read": float(self.rows_read),
            "data/bad_rows": float(self.bad_total),
            "data/duplicates_removed": float(self.duplicates_removed),
            "data/train_documents": float(self.train_documents),
            "data/validation_documents": float(self.validation_documents),
        }
        out.update({f"data/bad_rows/{reason}": float(n) for reason, n in self.bad_rows.items()})
        return out

    def summary(self) -> str:
        lines = [
            f"data: {len(self.files)} file(s), {self.rows_read} rows read, "
            f"{self.train_documents} train / {self.validation_documents} validation documents",
        ]
        if self.bad_total:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.bad_rows.items()))
            lines.append(f"data: skipped {self.bad_total} bad row(s): {reasons}")
            lines.extend(f"  {example}" for example in self.bad_examples[:5])
            if self.bad_total > 5:
                lines.append(f"  ... see the data_report.json artifact for up to {_MAX_BAD_EXAMPLES} examples")
        if self.duplicates_removed:
            lines.append(f"data: removed {self.duplicates_removed} exact duplicate document(s)")
        if self.truncated:
            lines.append(f"data: stopped after data.max_documents ({self.truncated} later documents not used)")
        return "\n".join(lines)


def text_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def split_of(digest: int, seed: int, validation_fraction: float) -> str:
    salted = hashlib.blake2b(f"{seed}:{digest}".encode(), digest_size=8).digest()
    bucket = int.from_bytes(salted, "little") % _SPLIT_BUCKETS
    return VALIDATION if bucket < validation_fraction * _SPLIT_BUCKETS else TRAIN


def document_text(row: Record | BadRow, cfg: DataConfig, fmt: str) -> str | BadRow:
    """The cleaned text of a row, or why it cannot be used (one text column: `data.text_field`)."""
    if isinstance(row, BadRow):
        return row
    return _field_text(row, "text" if fmt == "text" else cfg.text_field, cfg)


def document_texts(row: Record | BadRow, cfg: DataConfig, fmt: str) -> list[str | BadRow]:
    """The documents of a row: one, or with `data.text_fields` one per listed column the row has."""
    if isinstance(row, BadRow) or fmt == "text" or not cfg.text_fields:
        return [document_text(row, cfg, fmt)]
    present = [name for name in cfg.text_fields if name in row.fields]
    if not present:
        available = ", ".join(sorted(map(str, row.fields))) or "none"
        return [BadRow(row.path, row.line, f"missing text fields {list(cfg.text_fields)} (fields: {available})")]
    return [_field_text(row, name, cfg) for name in present]


def _field_text(row: Record, field_name: str, cfg: DataConfig) -> str | BadRow:
    if field_name not in row.fields:
        available = ", ".join(sorted(map(str, row.fields))) or "none"
        return BadRow(row.path, row.line, f"missing text field {field_name!r} (fields: {available})")
    value = row.fields[field_name]
    if not isinstance(value, str):
        if value is None:
            return BadRow(row.path, row.line, f"text field {field_name!r} is null")
        return BadRow(row.path, row.line, f"text field {field_name!r} is {type(value).__name__}, not a string")
    text = clean_text(value) if cfg.clean else value
    if len(text.strip()) < cfg.min_chars:
        return BadRow(row.path, row.line, "empty document" if not text.strip() else f"shorter than min_chars={cfg.min_chars}")
    return text


def reason_key(reason: str) -> str:
    """A short, countable category for a bad-row reason."""
    for key in ("not valid UTF-8", "not valid JSON", "missing text field", "empty document", "is null", "more columns"):
        if key in reason:
            return key.replace(" ", "_").replace("-", "").lower()
    return reason.split("(")[0].strip().replace(" ", "_").lower()[:40]


def iter_rows(path: str, fmt: str, cfg: DataConfig) -> Iterator[list[tuple[int, str] | BadRow]]:
    """Per row of a file: (line, cleaned text) for each of its usable documents, BadRow for the rest."""
    for row in read_rows(path, fmt):  # type: ignore[arg-type]
        yield [result if isinstance(result, BadRow) else (row.line, result) for result in document_texts(row, cfg, fmt)]


def iter_documents(path: str, fmt: str, cfg: DataConfig) -> Iterator[tuple[int, str] | BadRow]:
    """(line, cleaned text) for each usable document of a file, BadRow for the rest."""
    for documents in iter_rows(path, fmt, cfg):
        yield from documents


def scan_file(path: str, fmt: str, cfg: DataConfig) -> FileScan:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    hashes: list[int] = []
    bad_counts: Counter[str] = Counter()
    bad_examples: list[str] = []
    rows = 0
    for documents in iter_rows(path, fmt, cfg):
        rows += 1
        for item in documents:
            if isinstance(item, BadRow):
                if cfg.on_bad_row == "fail":
                    raise DataError(f"bad row (data.on_bad_row=fail): {item}")
                bad_counts[reason_key(item.reason)] += 1
                if len(bad_examples) < _MAX_BAD_EXAMPLES:
                    bad_examples.append(str(item))
            else:
                hashes.append(text_hash(item[1]))
    return FileScan(path, rows, np.asarray(hashes, dtype=np.uint64), dict(bad_counts), bad_examples, sha.hexdigest())


@dataclass
class CorpusPlan:
    cfg: DataConfig
    files: list[FilePlan]
    report: DataReport


def scan_corpus(cfg: DataConfig, use_ray: bool = True) -> CorpusPlan:
    """Validate the corpus and decide which rows go where. Raises DataError on unusable input."""
    # With explicit validation files nothing is split off the training files.
    train_split = TRAIN if cfg.validation_paths else None
    sources = [(p, train_split) for p in expand_paths(cfg.train_paths)]
    sources += [(p, VALIDATION) for p in expand_paths(cfg.validation_paths)]
    formats = [detect_format(p, cfg.format) for p, _ in sources]
    scans = _run_scans([(p, f) for (p, _), f in zip(sources, formats)], cfg, use_ray)

    report = DataReport(files=[p for p, _ in sources])
    bad: Counter[str] = Counter()
    seen: set[int] = set()
    plans: list[FilePlan] = []
    budget = cfg.max_documents
    fingerprint = hashlib.sha256()
    for (path, fixed_split), fmt, scan in zip(sources, formats, scans):
        fingerprint.update(scan.sha256.encode())
        report.rows_read += scan.rows
        bad.update(scan.bad_counts)
        report.bad_examples.extend(scan.bad_examples[: _MAX_BAD_EXAMPLES - len(report.bad_examples)])
        keep = np.ones(len(scan.hashes), dtype=bool)
        for index, digest in enumerate(scan.hashes.tolist()):
            if cfg.dedup:
                if digest in seen:
                    keep[index] = False
                    report.duplicates_removed += 1
                    continue
                seen.add(digest)
            if budget is not None and fixed_split != VALIDATION:
                if budget <= 0:
                    keep[index] = False
                    report.truncated += 1
                    continue
                budget -= 1
            split = fixed_split or split_of(digest, cfg.seed, cfg.validation_fraction)
            if split == TRAIN:
                report.train_documents += 1
            else:
                report.validation_documents += 1
        plans.append(FilePlan(path, fmt, fixed_split, None if keep.all() else keep))
    report.bad_rows = dict(bad)
    report.fingerprint = fingerprint.hexdigest()[:16]
    if report.train_documents == 0:
        raise DataError(
            f"no usable training documents in {', '.join(cfg.train_paths)} "
            f"({report.rows_read} rows read, {report.bad_total} bad)"
            + (f"; first problem: {report.bad_examples[0]}" if report.bad_examples else "")
        )
    return CorpusPlan(cfg, plans, report)


def _run_scans(files: list[tuple[str, str]], cfg: DataConfig, use_ray: bool) -> list[FileScan]:
    if not use_ray or len(files) == 1:
        return [scan_file(path, fmt, cfg) for path, fmt in files]
    import ray

    remote_scan = ray.remote(num_cpus=1)(scan_file)
    refs = [remote_scan.remote(path, fmt, cfg) for path, fmt in files]
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, DataError):
            raise exc.cause from None
        raise


def plan_documents(plan: FilePlan, cfg: DataConfig) -> Iterator[dict[str, Any]]:
    """The kept documents of one file, each tagged with its split."""
    index = -1
    for item in iter_documents(plan.path, plan.fmt, cfg):
        if isinstance(item, BadRow):
            continue
        index += 1
        if plan.keep is not None and not plan.keep[index]:
            continue
        line, text = item
        split = plan.split or split_of(text_hash(text), cfg.seed, cfg.validation_fraction)
        yield {"text": text, "source": f"{plan.path}:{line}", "split": split}


def local_documents(corpus: CorpusPlan, split: str) -> Iterator[str]:
    """Texts of one split, read in this process (small corpora, evaluation, benchmarks)."""
    for file_plan in corpus.files:
        for doc in plan_documents(file_plan, corpus.cfg):
            if doc["split"] == split:
                yield doc["text"]


class _ReadPlannedFile:
    def __init__(self, cfg: DataConfig, split: str):
        self.cfg = cfg
        self.split = split

    def __call__(self, row: dict[str, Any]) -> Iterator[dict[str, Any]]:
        keep = np.frombuffer(row["keep"], dtype=bool) if row["keep"] else None
        plan = FilePlan(row["path"], row["fmt"], row["split"] or None, keep)
        for doc in plan_documents(plan, self.cfg):
            if doc["split"] == self.split:
                yield {"text": doc["text"], "source": doc["source"]}


def corpus_datasets(corpus: CorpusPlan) -> dict[str, Any]:
    """Lazy Ray datasets {'train', 'validation'} with columns text, source."""
    import ray.data

    items = [
        {"path": p.path, "fmt": p.fmt, "split": p.split or "", "keep": b"" if p.keep is None else p.keep.tobytes()}
        for p in corpus.files
    ]
    plans = ray.data.from_items(items, override_num_blocks=max(1, len(items)))
    splits = [TRAIN] + ([VALIDATION] if corpus.report.validation_documents else [])
    # Reading and cleaning are light next to training, and the Train workers hold
    # the cluster's CPUs: with a CPU request these tasks wait forever on a small node.
    return {split: plans.flat_map(_ReadPlannedFile(corpus.cfg, split), num_cpus=0) for split in splits}
