"""Planned batches, one Ray dataset per rank.

Planned batches (the bi-encoder's group-aware batches) bypass Ray Train's split: the driver
orders the rows into global batches per epoch, and each rank gets a dataset of its own
(`rank_dataset_name`, not split, read in order) holding, epoch after epoch, its
contiguous slice of every global batch, one row per local batch. So at every step the
ranks' local batches together are exactly one planned global batch.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from lmplatform.data.corpus import TRAIN


def rank_dataset_name(rank: int) -> str:
    """The dataset holding one rank's planned local batches."""
    return f"{TRAIN}_rank{rank}"


def rank_slices(size: int, world: int) -> list[slice]:
    """Contiguous slices of a global batch of `size` rows, one per rank, as equal as possible (earlier ranks
    take the extra rows of a short batch)."""
    bounds = np.cumsum([0] + [size // world + (r < size % world) for r in range(world)])
    return [slice(int(bounds[r]), int(bounds[r + 1])) for r in range(world)]


def planned_rank_rows(rows: Sequence[dict[str, Any]], epochs: Sequence[Sequence[Sequence[int]]],
                      world: int) -> list[list[dict[str, Any]]]:
    """Per rank, one row per local batch: {'epoch', 'batch'}, 'batch' holding the batch's columns as JSON.

    `rows` are the training rows (dicts of the same columns), `epochs[e]` the global batches of epoch e as
    row indices. JSON keeps one schema for every block, whatever the lists inside hold (an empty list
    of hard negatives has no Arrow type of its own).
    """
    per_rank: list[list[dict[str, Any]]] = [[] for _ in range(world)]
    for epoch, batches in enumerate(epochs):
        for batch in batches:
            if len(batch) < world:
                raise ValueError(f"a planned global batch of {len(batch)} rows cannot give each of {world} ranks a row")
            for rank, part in enumerate(rank_slices(len(batch), world)):
                local = [rows[i] for i in batch[part]]
                columns = {name: [row[name] for row in local] for name in local[0]}
                per_rank[rank].append({"epoch": epoch, "batch": json.dumps(columns, ensure_ascii=False)})
    return per_rank


def planned_datasets(per_rank: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """Ray datasets {rank_dataset_name(r): rank r's local batches} (lazy; a rank reads only its own)."""
    import ray.data

    return {rank_dataset_name(rank): ray.data.from_items(list(items)) for rank, items in enumerate(per_rank)}
