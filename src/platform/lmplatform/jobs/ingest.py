"""How training batches leave Ray Data for a Ray Train worker, in an order that a resumed run can reproduce.

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
"""
from __future__ import annotations

import json
import warnings
from typing import Any, Iterable, Iterator

import numpy as np

from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.train.ingest import NumpyBatch

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
