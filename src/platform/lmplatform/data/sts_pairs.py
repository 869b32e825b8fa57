"""Sentence pairs with a gold similarity score (STS): the JSONL reader, and readers of the shared benchmarks
(STS-B, SICK relatedness, BIOSSES) that know each one's file and scale.

Row rules (what makes a pair usable) are `lmplatform.data.fields.scored_pair`, the ones the `sts`
objective's training reader applies; unusable rows are skipped and listed as file:line: reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Sequence

import numpy as np

from lmplatform.data.fields import read_jsonl_examples, scored_pair
from lmplatform.data.readers import DataError


@dataclass(frozen=True)
class STSPairs:
    """Sentence pairs with gold scores on `scale` (low, high)."""

    name: str
    sentence1: list[str]
    sentence2: list[str]
    scores: np.ndarray
    scale: tuple[float, float]
    bad_rows: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.scores)

    def subset(self, index: Sequence[int] | np.ndarray) -> "STSPairs":
        index = list(index)
        return STSPairs(
            self.name,
            [self.sentence1[i] for i in index],
            [self.sentence2[i] for i in index],
            self.scores[index],
            self.scale,
            self.bad_rows,
        )


def read_pairs_jsonl(
    path: str | Path,
    name: str,
    scale: Optional[tuple[float, float]],
    score_field: str = "score",
    sentence1_field: str = "sentence1",
    sentence2_field: str = "sentence2",
    where: Optional[dict[str, object]] = None,
    limit: Optional[int] = None,
) -> STSPairs:
    """Read scored pairs; rows that are malformed or off the scale are skipped and listed as file:line.

    `scale=None` infers the scale as the (min, max) of the gold scores read: fine for a
    set that uses its whole scale (STS-B, SICK), too narrow for a small sample of one.
    """
    path = str(path)
    keep = (lambda fields: all(_matches(fields.get(k), v) for k, v in where.items())) if where else None
    pairs, bad = read_jsonl_examples(
        path, "STS", lambda fields: scored_pair(fields, sentence1_field, sentence2_field, score_field, scale, clean=False),
        keep, limit)
    if not pairs:
        raise DataError(f"no usable pairs in {path}" + (f" matching {where}" if where else "")
                        + (f"; first problem: {bad[0]}" if bad else ""))
    s1, s2 = [p[0] for p in pairs], [p[1] for p in pairs]
    gold = np.asarray([p[2] for p in pairs], dtype=np.float64)
    if scale is None:
        if gold.min() == gold.max():
            raise DataError(f"cannot infer the score scale of {path}: every gold score is {gold.min()}; set the scale")
        scale = (float(gold.min()), float(gold.max()))
    return STSPairs(name, s1, s2, gold, scale, bad)


def _matches(value: object, wanted: object) -> bool:
    return value in wanted if isinstance(wanted, (set, frozenset, list, tuple)) else value == wanted


def read_stsb(root: Path, split: Literal["train", "dev", "test"] = "test", limit: Optional[int] = None) -> STSPairs:
    """STS Benchmark, scores 0-5 (`stsbenchmark/sts-<split>.jsonl`)."""
    return read_pairs_jsonl(root / "stsbenchmark" / f"sts-{split}.jsonl", f"stsb-{split}", (0.0, 5.0), limit=limit)


def read_sick(root: Path, split: Literal["train", "dev", "test"] = "test", limit: Optional[int] = None) -> STSPairs:
    """SICK relatedness, scores 1-5 (SemEval-2014 split in the `split` field)."""
    return read_pairs_jsonl(root / "sick" / "sick.jsonl", f"sick-{split}", (1.0, 5.0), score_field="relatedness_score",
                            where={"split": split}, limit=limit)


def read_biosses(root: Path, folds: Optional[Sequence[int]] = None, limit: Optional[int] = None) -> STSPairs:
    """BIOSSES, mean of 5 annotators on 0-4; `folds` selects among the 10 folds (all by default)."""
    where = None if folds is None else {"fold": set(folds)}
    return read_pairs_jsonl(root / "biosses" / "biosses.jsonl", "biosses", (0.0, 4.0), where=where, limit=limit)
