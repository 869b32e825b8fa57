"""Length-grouped batches: rows of similar length share a batch, so dynamic padding pads less.

Like `group_batches.conflict_free_batches`, this is a pure ordering, deterministic per seed: one
buffer of rows (several batches' worth, read in the data's own shuffled order) is sorted by length,
cut into batches, and the batches are put in a seeded random order, so that an epoch does not run
from short to long texts. Every row of the buffer is in exactly one batch.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def length_grouped_batches(lengths: Sequence[int], batch_size: int, seed: Sequence[int]) -> list[list[int]]:
    """Row indices of `lengths` in batches of `batch_size` (the last one may be short), rows of a batch of
    similar length; the batches in an order drawn from `seed` (numpy SeedSequence entropy)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    by_length = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")  # ties keep the data's order
    batches = [by_length[start:start + batch_size].tolist() for start in range(0, len(by_length), batch_size)]
    order = np.random.default_rng(list(seed)).permutation(len(batches))
    return [batches[i] for i in order]


def _text_length(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple, np.ndarray)):  # hard negatives, a list of texts
        return sum(_text_length(item) for item in value)
    return 0


def row_lengths(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Characters of each row's texts, summed over its text columns (a list column counts every text in it).

    Characters, not tokens: sorting needs only the order, and tokenizing twice would cost what the
    grouping saves. Numeric columns (labels, scores) count nothing.
    """
    rows = len(next(iter(columns.values()))) if columns else 0
    total = np.zeros(rows, dtype=np.int64)
    for column in columns.values():
        if column.dtype.kind in "OUS":
            total += np.fromiter((_text_length(v) for v in column), dtype=np.int64, count=rows)
    return total
