"""How training batches reach a worker, in an order that a resumed run can reproduce.

A checkpoint records how many micro-batches of the current epoch were consumed
(`Progress.batches_in_epoch`), and a resumed run skips that many. Skipping a count
continues the same trajectory only if every pass over the same epoch yields the
same batches on the same rank. By default Ray Data hands blocks to the consumer
that asks first and emits them as they finish (`preserve_order=False`), and a
streaming split follows node locality, so which rows a rank gets, and in which
order, depends on task timing. Training therefore ingests with
`preserve_order=True` (Ray Data then also ignores locality hints when splitting):
each rank receives blocks in dataset order, assigned to the rank with the fewest
rows so far, and the seeded local shuffle over that fixed sequence is fixed too.
This holds for the same dataset blocks: a `--resume` that re-reads the data gets
them when the data and Ray Data's block planning are unchanged.

Planned batches (the bi-encoder's group-aware batches) bypass the split: the driver
orders the rows into global batches per epoch, and each rank gets a dataset of its own
(`rank_dataset_name`, not split, read in order) holding, epoch after epoch, its
contiguous slice of every global batch, one row per local batch. So at every step the
ranks' local batches together are exactly one planned global batch.
"""
from __future__ import annotations

import json
import warnings
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.length_batches import length_grouped_batches, row_lengths
from lmplatform.train.recipe import Batch

NumpyBatch = dict[str, np.ndarray]


# Ray Data's own defaults set the deprecated ExecutionOptions.exclude_resources, and warn about it on
# every run (two console lines each); nothing here sets it.
_RAY_OWN_DEPRECATION = ".*ExecutionOptions.exclude_resources.*"


def ingest_options() -> Any:
    """Ray Train's default ingest options (the driver's DataContext), with the order preserved."""
    from ray.train import DataConfig

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RAY_OWN_DEPRECATION)
        options = DataConfig.default_ingest_options()
    options.preserve_order = True
    return options


def ingest_config() -> Any:
    """Ray Train's dataset config for training runs (`TorchTrainer(dataset_config=...)`)."""
    from ray.train import DataConfig

    # Locality would pick a rank by where a block lives; preserve_order already turns it off.
    # Only the train and validation datasets are split; a rank's planned batches reach that rank whole.
    options = ingest_options()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RAY_OWN_DEPRECATION)
        return DataConfig(datasets_to_split=[TRAIN, VALIDATION], execution_options=options, enable_shard_locality=False)


def shuffle_seed(seed: int, epoch: int, rank: int) -> int:
    """The local shuffle seed of one rank's epoch: a new order each epoch, another on each rank."""
    return seed + 7919 * epoch + rank


def shard_epoch(shard: Any, batch_size: int, seed: int, epoch: int, rank: int) -> Iterable[NumpyBatch]:
    """One epoch of a Ray Train dataset shard as numpy batches, locally shuffled with a fixed seed (lazy:
    the epoch starts when the first batch is asked for)."""
    return shard.iter_batches(
        batch_size=batch_size,
        batch_format="numpy",
        local_shuffle_buffer_size=max(4 * batch_size, 256),
        local_shuffle_seed=shuffle_seed(seed, epoch, rank),
    )


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


# -- planned batches -----------------------------------------------------------

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


def _numpy_batch(columns: dict[str, list[Any]]) -> NumpyBatch:
    out = {}
    for name, values in columns.items():
        array = np.empty(len(values), dtype=object)  # one entry per row, even when the entries are lists
        for index, value in enumerate(values):  # (a slice assignment would broadcast equal-length lists)
            array[index] = value
        out[name] = array
    return out


def planned_epoch(shard: Any, epoch: int) -> Iterator[NumpyBatch]:
    """One epoch of a rank's planned batches, in plan order, as numpy batches (the rows of earlier epochs
    are read and passed over; reading stops at the next epoch's first row)."""
    for row in shard.iter_rows():
        if row["epoch"] < epoch:
            continue
        if row["epoch"] > epoch:
            return
        yield _numpy_batch(json.loads(row["batch"]))
