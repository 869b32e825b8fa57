"""The bi-encoder's group-aware batches (`objective.group_aware_batches`), planned on the driver.

The pairs are ordered per epoch (`data.group_batches.conflict_free_batches`, seeded by `optim.seed`,
length-grouped with `data.length_grouping`) into global batches of `optim.batch_size x scaling.num_workers`
rows that hold no two pairs of one duplicate group and no text twice, for as many epochs as the run's
steps need; each worker reads its contiguous slice of every global batch (`data.rank_batches.planned_rank_rows`),
so the batch the bi-encoder gathers its negatives from is exactly one planned batch.
"""
from __future__ import annotations

from typing import Sequence

from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.group_batches import BatchOrder, Keys, conflict_free_batches, pair_conflict_keys
from lmplatform.data.pairs import Pair, PairSet, pair_datasets
from lmplatform.data.rank_batches import planned_datasets, planned_rank_rows
from lmplatform.data.readers import DataError
from lmplatform.objectives.pair_data import prepared_pairs
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.optim import total_optimizer_steps
from lmplatform.train.recipe import PreparedData

CHARS_PER_TOKEN = 5  # WordPiece on English prose: about 4-5 characters a token, so the cap rarely cuts short


def pair_lengths(pairs: Sequence[Pair], max_hard_negatives: int, max_chars: int) -> list[int]:
    """Characters of the texts a pair brings to its batch (query, document, the negatives the collator takes),
    each counted up to `max_chars`: past the tokenizer's truncation, a longer text pads no more."""
    return [sum(min(len(text), max_chars) for text in (p.query, p.document, *p.hard_negatives[:max_hard_negatives]))
            for p in pairs]


def plan_epochs(pairs: PairSet, keys: Sequence[Keys], negative_keys: Sequence[Keys], cfg: RunConfig) -> list[BatchOrder]:
    """One conflict-free order per epoch, until the orders hold every micro-batch of every optimizer step."""
    world, batch_size = cfg.scaling.num_workers, cfg.optim.batch_size
    needed = total_optimizer_steps(cfg.optim, len(pairs.train), world) * cfg.optim.grad_accum_steps
    grouping = cfg.data.length_grouping
    lengths = None
    if grouping is not None:
        negatives = cfg.objective.max_hard_negatives if cfg.data.hard_negative_field is not None else 0
        lengths = pair_lengths(pairs.train, negatives, CHARS_PER_TOKEN * cfg.model.max_seq_length)
    orders: list[BatchOrder] = []
    while sum(len(order.batches) for order in orders) < needed:
        order = conflict_free_batches(keys, batch_size * world, cfg.optim.seed, len(orders), negative_keys,
                                      min_batch_size=world, lengths=lengths,
                                      buffer_batches=grouping.buffer_batches if grouping else 64)
        if not order.batches:
            raise DataError(f"group-aware batches: {len(pairs.train)} training pairs make no global batch with a pair "
                            f"for each of scaling.num_workers={world} workers")
        orders.append(order)
    return orders


def plan_pairs(pairs: PairSet, cfg: RunConfig) -> tuple[list[Keys], list[BatchOrder]]:
    """The training pairs' conflict keys (their groups linked through the validation pairs too) and the
    epochs' orders the driver plans from them for `cfg`."""
    negatives = cfg.objective.max_hard_negatives if cfg.data.hard_negative_field is not None else 0
    keys, negative_keys = pair_conflict_keys(pairs.train, pairs.validation, negatives)
    return keys, plan_epochs(pairs, keys, negative_keys, cfg)


def group_aware_data(pairs: PairSet, cfg: RunConfig) -> PreparedData:
    """The pair data with its training rows as per-rank planned batches (`PreparedData.planned_batches`)."""
    keys, orders = plan_pairs(pairs, cfg)
    world = cfg.scaling.num_workers
    rows = pairs.rows(TRAIN)
    for row in rows:
        row.pop("source")  # provenance for reports, never read by the collator
    per_rank = planned_rank_rows(rows, [order.batches for order in orders], world)
    datasets = pair_datasets(pairs, {VALIDATION: pairs.rows(VALIDATION)}) | planned_datasets(per_rank)
    groups = {key for row_keys in keys for key in row_keys if key[0] != "text"}  # the rest name groups
    first = orders[0]
    metrics = {
        "data/train_groups": float(len(groups)),
        "data/group_batches_epochs": float(len(orders)),
        "data/group_batches_deferred_rows": float(first.deferred_rows),
        "data/group_batches_short": float(first.short_batches),
        "data/group_batches_dropped_rows": float(len(first.dropped_rows)),
    }
    summary = (f"\ndata: group-aware batches of {cfg.optim.batch_size} x {world} worker(s): {len(pairs.train)} pairs in "
               f"{len(groups)} duplicate groups; epoch 0 has {len(first.batches)} batches, {first.deferred_rows} pair(s) "
               f"deferred to a later batch, {first.short_batches} short batch(es), {len(first.dropped_rows)} pair(s) "
               f"left out ({len(orders)} epoch(s) planned)")
    prepared = prepared_pairs(pairs, datasets, len(pairs.train), metrics, summary)
    prepared.planned_batches = True
    return prepared
