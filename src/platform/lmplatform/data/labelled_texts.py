"""Texts with a label, for evaluation: the JSONL reader, and readers of the shared sets (medical abstracts,
ASRS reports, the demo's trouble reports) that know each one's file, text and label fields.

Row rules (what makes a row usable) are `lmplatform.data.fields.labelled_text`, the ones the `classifier`
objective's training reader applies; unusable rows are skipped and listed as file:line: reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from lmplatform.data.fields import labelled_text, read_jsonl_examples
from lmplatform.data.readers import DataError


@dataclass
class LabelledTexts:
    name: str
    texts: list[str]
    labels: list[str]
    splits: list[str]
    bad_rows: list[str]

    def split(self, name: str) -> tuple[list[str], list[str]]:
        index = [i for i, s in enumerate(self.splits) if s == name]
        return [self.texts[i] for i in index], [self.labels[i] for i in index]


def read_labelled_texts(path: str | Path, name: str, text_fields: Sequence[str], label_field: str,
                        split_field: Optional[str] = "split", limit: Optional[int] = None) -> LabelledTexts:
    """Rows -> (text, label, split); text fields are joined with '. '; bad rows are listed as file:line."""
    path = str(path)

    def extract(fields: dict[str, Any]) -> tuple[str, str, str] | str:
        example = labelled_text(fields, text_fields, label_field, clean=False)
        if isinstance(example, str):
            return example
        split = str(fields.get(split_field, "")) if split_field else ""
        return example[0].strip(), example[1], split  # evaluation texts are stripped, not cleaned

    rows, bad = read_jsonl_examples(path, "classification", extract, limit=limit)
    if not rows:
        raise DataError(f"no usable rows in {path}" + (f"; first problem: {bad[0]}" if bad else ""))
    return LabelledTexts(name, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], bad)


def read_medical_abstracts(root: Path, limit: Optional[int] = None) -> LabelledTexts:
    """5 condition classes (`label_name`), split train/dev/test (stratified 60/20/20); `root` holds medical_abstracts_tc/."""
    return read_labelled_texts(root / "medical_abstracts_tc" / "abstracts.jsonl", "medical_abstracts_tc", ["text"],
                               "label_name", limit=limit)


def merge_rare_labels(labels: Sequence[str], splits: Sequence[str], min_size: int, count_split: str = "train",
                      other: str = "Other") -> list[str]:
    """`labels` with every class that has fewer than `min_size` rows in the `count_split` split renamed `other`
    (in every split).

    Counted on the training split only: counting dev or test labels would let the held-out data decide
    which classes the model is trained and scored on. A class seen only outside training becomes `other` too.
    """
    if len(labels) != len(splits):
        raise ValueError(f"{len(labels)} labels but {len(splits)} split names")
    counts: dict[str, int] = {}
    for label, split in zip(labels, splits):
        if split == count_split:
            counts[label] = counts.get(label, 0) + 1
    if not counts:
        raise DataError(f"no rows in split {count_split!r} to count classes in (splits present: {sorted(set(splits))})")
    return [label if counts.get(label, 0) >= min_size else other for label in labels]


def read_asrs(root: Path, label_field: str = "primary_problem", min_class_size: int = 10,
              limit: Optional[int] = None) -> LabelledTexts:
    """ASRS narratives labelled by `primary_problem`; reports without it are bad rows.

    Classes with fewer than `min_class_size` reports in the train split are merged into "Other": with a
    60/20/20 random split they would otherwise be missing from dev or test, or too few to learn.
    """
    data = read_labelled_texts(root / "asrs_nmac_reports" / "reports.jsonl", "asrs_nmac_reports", ["narrative"],
                               label_field, limit=limit)
    data.labels = merge_rare_labels(data.labels, data.splits, min_class_size)
    return data


def read_demo_reports(path: Path, limit: Optional[int] = None) -> LabelledTexts:
    """The shipped trouble reports: title + text, label `component` (8 classes), no split field."""
    return read_labelled_texts(path, "demo_reports", ["title", "text"], "component", split_field=None, limit=limit)
