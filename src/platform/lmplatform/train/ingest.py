"""Batches on their way into the loop, Ray-free: regrouped by length, and skipped up to a checkpoint's count when a
run resumes. How they leave Ray Data in a reproducible order: `jobs/ingest.py`; planned batches: `data/rank_batches.py`.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np

from lmplatform.data.length_batches import length_grouped_batches, row_lengths
from lmplatform.train.recipe import Batch

NumpyBatch = dict[str, np.ndarray]


def length_grouped(batches: Iterable[NumpyBatch], batch_size: int, buffer_batches: int, seed: int, epoch: int,
                   rank: int) -> Iterator[NumpyBatch]:
    """`batches` regrouped by length (`data.length_grouping`): the rows of every `buffer_batches` batches,
    in batches of similar length, in an order seeded per (seed, epoch, rank, buffer).

    A pure function of the incoming batches, so the fixed order of a rank's shard gives a fixed grouped
    order, and `resume_batches` skipping a checkpoint's count of grouped batches lands where the
    interrupted run stopped. Every incoming row comes out exactly once, with as many full batches.
    """
    buffer: list[NumpyBatch] = []
    rows = index = 0

    def flush() -> Iterator[NumpyBatch]:
        columns = {name: np.concatenate([b[name] for b in buffer]) for name in buffer[0]}
        for rows_of_batch in length_grouped_batches(row_lengths(columns), batch_size, [seed, epoch, rank, index]):
            yield {name: column[rows_of_batch] for name, column in columns.items()}

    for batch in batches:
        buffer.append(batch)
        rows += len(next(iter(batch.values())))
        if rows >= buffer_batches * batch_size:
            yield from flush()
            buffer, rows, index = [], 0, index + 1
    if buffer and rows:
        yield from flush()


def resume_batches(batches: Iterable[NumpyBatch], collate: Callable[[NumpyBatch], Batch], skip: int) -> Iterator[Batch]:
    """Collated batches after the first `skip`, which are read but not collated: a collator that draws
    at random (DeCLUTR's spans) was restored to its state after exactly those batches."""
    for index, batch in enumerate(batches):
        if index >= skip:
            yield collate(batch)
