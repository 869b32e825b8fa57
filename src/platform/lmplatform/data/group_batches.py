"""Group-aware batch order: no global batch holds two members of one duplicate group, or one text twice.

In-batch negatives assume every other document of the batch is wrong for a query. Duplicate bug
reports come in groups (A dup B, B dup C), so a random batch of pairs can hold B-C beside A-B: the
document C is then a "negative" for query A although it describes the same bug (a false negative),
and a text that occurs in two pairs of one batch is its own negative. This module orders a
training split, once per epoch, into global batches that avoid both.

Each row has conflict keys (its group, its query and document texts) and, when it brings hard
negatives, negative keys (those texts and their groups). Two rows conflict when their conflict keys
meet, or when one's negative keys meet the other's conflict keys (a hard negative that is another
query's positive, or of its group). `conflict_free_batches` is the pure ordering; `pair_conflict_keys`
derives the keys of (query, document) pairs.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Hashable, Optional, Sequence

import numpy as np

from lmplatform.data.groups import pair_group_ids
from lmplatform.data.pairs import Pair

Keys = frozenset[Hashable]


@dataclass(frozen=True)
class BatchOrder:
    """One epoch's order: `batches` holds row indices per global batch, in training order.

    `deferred_rows`: rows set aside at least once because they conflicted with the batch being filled
    (each went to a later batch). `dropped_rows`: rows of final batches smaller than `min_batch_size`,
    left out of this epoch (they come back, at another place, in the next epoch's order)."""

    batches: list[list[int]]
    deferred_rows: int = 0
    dropped_rows: list[int] = field(default_factory=list)

    @property
    def short_batches(self) -> int:
        """Batches with fewer rows than the largest one (only the epoch's tail can have them)."""
        largest = max((len(b) for b in self.batches), default=0)
        return sum(len(b) < largest for b in self.batches)


class _FillingBatch:
    """The batch being filled: its rows, the conflict keys they hold and the negative keys they bring."""

    def __init__(self, keys: Sequence[Keys], negatives: Sequence[Keys]):
        self.keys, self.negatives = keys, negatives
        self.rows: list[int] = []
        self.taken: set[Hashable] = set()
        self.avoided: set[Hashable] = set()

    def fits(self, row: int) -> bool:
        return (self.keys[row].isdisjoint(self.taken) and self.negatives[row].isdisjoint(self.taken)
                and self.keys[row].isdisjoint(self.avoided))

    def add(self, row: int) -> None:
        self.rows.append(row)
        self.taken.update(self.keys[row])
        self.avoided.update(self.negatives[row])


def conflict_free_batches(
    keys: Sequence[Keys],
    batch_size: int,
    seed: int,
    epoch: int,
    negative_keys: Optional[Sequence[Keys]] = None,
    min_batch_size: int = 1,
    lengths: Optional[Sequence[int]] = None,
    buffer_batches: int = 64,
) -> BatchOrder:
    """Every row in batches of at most `batch_size` rows, no two conflicting rows in one batch.

    Deterministic per (seed, epoch): the rows are drawn in a seeded random order, and each batch is
    filled greedily: first with the rows deferred earlier (oldest first) that fit, then from the
    draw; a drawn row that conflicts with the batch is deferred to a later batch. Every batch is full
    until the draw runs out; after that the deferred rows make the epoch's last batches, which may
    be short (e.g. the tail of a group larger than the number of batches, one member per batch: a
    group is split across batches, never co-batched). Batches with fewer than `min_batch_size` rows
    (a global batch needs a row for every worker) are dropped and counted in `dropped_rows`.

    With `lengths` (one per row), the draw is length-grouped so that dynamic padding pads less: each
    run of `buffer_batches x batch_size` drawn rows is sorted by length, and the full batches are then
    put in a seeded random order (the short ones stay last), so an epoch does not go from short to long.

    Deferred rows are scanned for every batch, so the cost is O(rows x deferred rows / batch_size) in
    the worst case (one huge group); with groups of a few rows it stays near linear.
    """
    if batch_size < 1 or min_batch_size < 1:
        raise ValueError(f"batch_size ({batch_size}) and min_batch_size ({min_batch_size}) must be >= 1")
    negatives = negative_keys if negative_keys is not None else [frozenset()] * len(keys)
    if len(negatives) != len(keys):
        raise ValueError(f"{len(keys)} rows of keys but {len(negatives)} rows of negative keys")
    order = np.random.default_rng([seed, epoch]).permutation(len(keys))
    if lengths is not None:
        order = _length_sorted_buffers(order, lengths, buffer_batches * batch_size)
    draw = deque(int(i) for i in order)
    deferred: list[int] = []
    ever_deferred: set[int] = set()
    batches: list[list[int]] = []
    dropped: list[int] = []
    while draw or deferred:
        batch = _FillingBatch(keys, negatives)
        still_deferred = []
        for row in deferred:
            if len(batch.rows) < batch_size and batch.fits(row):
                batch.add(row)
            else:
                still_deferred.append(row)
        deferred = still_deferred
        while len(batch.rows) < batch_size and draw:
            row = draw.popleft()
            if batch.fits(row):
                batch.add(row)
            else:
                deferred.append(row)
                ever_deferred.add(row)
        if len(batch.rows) >= min_batch_size:
            batches.append(batch.rows)
        else:
            dropped += batch.rows
    if lengths is not None:
        full = [b for b in batches if len(b) == batch_size]
        shuffled = np.random.default_rng([seed, epoch, 1]).permutation(len(full))
        batches = [full[i] for i in shuffled] + [b for b in batches if len(b) < batch_size]
    return BatchOrder(batches, len(ever_deferred), dropped)


def _length_sorted_buffers(order: np.ndarray, lengths: Sequence[int], buffer_rows: int) -> np.ndarray:
    """`order` with each run of `buffer_rows` rows sorted by length (ties keep the drawn order)."""
    if len(lengths) != len(order):
        raise ValueError(f"{len(order)} rows but {len(lengths)} lengths")
    length_of = np.asarray(lengths, dtype=np.int64)
    runs = [order[start:start + buffer_rows] for start in range(0, len(order), buffer_rows)]
    return np.concatenate([run[np.argsort(length_of[run], kind="stable")] for run in runs]) if runs else order


def pair_conflict_keys(pairs: Sequence[Pair], linked: Sequence[Pair] = (),
                       max_hard_negatives: Optional[int] = None) -> tuple[list[Keys], list[Keys]]:
    """(conflict keys, negative keys) per pair of `pairs`.

    A pair's group is its `group` id when the data names one (`data.group_field`); otherwise the
    duplicate group of its texts, linked through every pair of `pairs` and `linked` (e.g. the
    validation pairs, whose links join training groups too). Texts are compared after the readers'
    cleaning. A hard negative's keys are its text and the groups of the pairs that text appears in;
    only the first `max_hard_negatives` of a pair count (those the collator puts in the batch).
    """
    everything = [*pairs, *linked]
    groups = pair_group_ids(everything)
    text_groups: dict[str, set[Hashable]] = {}
    for pair, group in zip(everything, groups):
        for text in (pair.query, pair.document):
            text_groups.setdefault(text, set()).add(group)
    keys = [frozenset({("text", p.query), ("text", p.document), group}) for p, group in zip(pairs, groups)]
    negative_keys = [
        frozenset(key for text in p.hard_negatives[:max_hard_negatives]
                  for key in ({("text", text)} | text_groups.get(text, set())))
        for p in pairs
    ]
    return keys, negative_keys
