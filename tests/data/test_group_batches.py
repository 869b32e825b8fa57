"""Group-aware batch order: no batch holds two members of a duplicate group, one text twice, or a hard
negative that is another row's positive; every row is used once per epoch, in an order fixed by (seed, epoch)."""
from __future__ import annotations

import json
import random
from typing import Sequence

from lmplatform.data.group_batches import BatchOrder, Keys, conflict_free_batches, pair_conflict_keys
from lmplatform.data.pairs import Pair
from lmplatform.data.rank_batches import planned_rank_rows, rank_slices


def _conflicts(batch: Sequence[int], keys: Sequence[Keys], negatives: Sequence[Keys]) -> list[tuple[int, int]]:
    return [(a, b) for a in batch for b in batch if a != b
            and (keys[a] & keys[b] or negatives[a] & keys[b])]


def _check_epoch(order: BatchOrder, keys: Sequence[Keys], negatives: Sequence[Keys], batch_size: int, min_size: int) -> None:
    for batch in order.batches:
        assert not _conflicts(batch, keys, negatives)
        assert min_size <= len(batch) <= batch_size
    used = [row for batch in order.batches for row in batch] + order.dropped_rows
    assert sorted(used) == list(range(len(keys)))  # every row once: in a batch, or left out of this epoch


def _random_rows(rng: random.Random, n: int) -> tuple[list[Keys], list[Keys]]:
    """Rows with random groups (some large), texts reused across rows, and hard negatives drawn from the texts."""
    texts = [f"t{i}" for i in range(rng.randint(n // 2, 2 * n))]
    keys = [frozenset({("group", rng.randint(0, n // 3)), ("text", rng.choice(texts)), ("text", rng.choice(texts))})
            for _ in range(n)]
    negatives = [frozenset(("text", rng.choice(texts)) for _ in range(rng.randint(0, 2))) for _ in range(n)]
    return keys, negatives


def test_no_batch_of_any_random_grouping_holds_a_conflict() -> None:
    rng = random.Random(0)
    for trial in range(60):
        n, batch_size, min_size = rng.randint(1, 120), rng.randint(1, 12), rng.randint(1, 3)
        keys, negatives = _random_rows(rng, n)
        order = conflict_free_batches(keys, batch_size, seed=trial, epoch=0, negative_keys=negatives, min_batch_size=min_size)
        _check_epoch(order, keys, negatives, batch_size, min_size)


def test_length_grouped_draws_keep_every_guarantee_and_pad_less() -> None:
    rng = random.Random(3)
    for trial in range(40):
        n, batch_size = rng.randint(2, 150), rng.randint(1, 12)
        keys, negatives = _random_rows(rng, n)
        lengths = [rng.randint(1, 500) for _ in range(n)]
        order = conflict_free_batches(keys, batch_size, seed=trial, epoch=0, negative_keys=negatives,
                                      lengths=lengths, buffer_batches=4)
        _check_epoch(order, keys, negatives, batch_size, 1)
        full = sum(len(b) == batch_size for b in order.batches)
        assert all(len(b) == batch_size for b in order.batches[:full])  # short batches only at the end

    # rows of their own (no conflicts): the padded length (each batch's longest row) falls by far
    keys = [frozenset({("group", i)}) for i in range(256)]
    lengths = [random.Random(i).randint(1, 1000) for i in range(256)]

    def padded(order: BatchOrder) -> int:
        return sum(len(b) * max(lengths[r] for r in b) for b in order.batches)

    plain = conflict_free_batches(keys, 16, seed=0, epoch=0)
    grouped = conflict_free_batches(keys, 16, seed=0, epoch=0, lengths=lengths, buffer_batches=16)
    assert padded(grouped) < 0.6 * padded(plain)
    spans = [max(lengths[r] for r in b) - min(lengths[r] for r in b) for b in grouped.batches]
    assert max(spans) < 200  # one sorted buffer: neighbours in length share a batch
    first_lengths = [lengths[b[0]] for b in grouped.batches]
    assert first_lengths != sorted(first_lengths)  # the batches themselves come in a shuffled order


def test_the_order_is_fixed_by_seed_and_epoch() -> None:
    keys, negatives = _random_rows(random.Random(1), 80)
    first = conflict_free_batches(keys, 8, seed=5, epoch=2, negative_keys=negatives)
    assert conflict_free_batches(keys, 8, seed=5, epoch=2, negative_keys=negatives) == first
    assert conflict_free_batches(keys, 8, seed=5, epoch=3, negative_keys=negatives).batches != first.batches
    assert conflict_free_batches(keys, 8, seed=6, epoch=2, negative_keys=negatives).batches != first.batches


def test_rows_that_do_not_fit_go_to_later_batches_and_too_short_batches_are_left_out() -> None:
    # one group of 5 rows and 3 rows of their own: the group needs 5 batches, one member in each
    keys = [frozenset({("group", "big"), ("text", f"g{i}")}) for i in range(5)]
    keys += [frozenset({("group", f"own{i}"), ("text", f"o{i}")}) for i in range(3)]
    for seed in range(20):
        order = conflict_free_batches(keys, 4, seed=seed, epoch=0)
        _check_epoch(order, keys, [frozenset()] * 8, 4, 1)
        assert len(order.batches) == 5 and order.deferred_rows > 0 and not order.dropped_rows
        assert order.short_batches > 0  # the tail: members of the group, one per batch

        strict = conflict_free_batches(keys, 4, seed=seed, epoch=0, min_batch_size=2)
        _check_epoch(strict, keys, [frozenset()] * 8, 4, 2)
        assert strict.dropped_rows and all(row < 5 for row in strict.dropped_rows)  # only group members are left over


def _pair(query: str, document: str, negatives: tuple[str, ...] = (), group: str | None = None) -> Pair:
    return Pair(query, document, negatives, group=group)


def _co_batched(order: BatchOrder, a: int, b: int) -> bool:
    return any(a in batch and b in batch for batch in order.batches)


def test_pairs_linked_through_a_chain_share_a_group() -> None:
    # A-B and C-D share no text, but B-C (a validation pair) links them: one group
    train = [_pair("A", "B"), _pair("C", "D")] + [_pair(f"q{i}", f"d{i}") for i in range(10)]
    keys, _ = pair_conflict_keys(train, linked=[_pair("B", "C")])
    assert keys[0] & keys[1] and not keys[0] & keys[2]
    for seed in range(20):
        assert not _co_batched(conflict_free_batches(keys, 12, seed=seed, epoch=0), 0, 1)


def test_named_groups_and_identical_texts_are_never_co_batched() -> None:
    # rows 0 and 1: one named group, no shared text; rows 2 and 3: other groups, the same document text
    train = [_pair("a", "b", group="g1"), _pair("c", "d", group="g1"), _pair("e", "same", group="g2"),
             _pair("f", "same", group="g3")] + [_pair(f"q{i}", f"d{i}", group=f"x{i}") for i in range(8)]
    keys, _ = pair_conflict_keys(train)
    for seed in range(20):
        order = conflict_free_batches(keys, 12, seed=seed, epoch=0)
        assert not _co_batched(order, 0, 1) and not _co_batched(order, 2, 3)


def test_a_hard_negative_is_never_another_rows_positive_in_the_batch() -> None:
    train = [_pair("q0", "d0", negatives=("d1", "far")), _pair("q1", "d1")] + [_pair(f"q{i}", f"d{i}") for i in range(2, 8)]
    keys, negatives = pair_conflict_keys(train)
    for seed in range(20):
        assert not _co_batched(conflict_free_batches(keys, 8, seed=seed, epoch=0, negative_keys=negatives), 0, 1)
    # only the hard negatives the collator uses count
    _, unused = pair_conflict_keys(train, max_hard_negatives=0)
    assert not any(unused)


def test_each_rank_takes_a_contiguous_slice_and_the_slices_make_the_global_batch() -> None:
    assert rank_slices(8, 2) == [slice(0, 4), slice(4, 8)]
    assert rank_slices(5, 2) == [slice(0, 3), slice(3, 5)]
    rows = [{"query": f"q{i}", "document": f"d{i}", "hard_negatives": [] if i % 2 else [f"n{i}"]} for i in range(10)]
    epochs = [[[3, 1, 4, 0], [9, 2, 6, 5], [8, 7]], [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]]
    per_rank = planned_rank_rows(rows, epochs, world=2)
    for step in range(len(per_rank[0])):
        local = [json.loads(per_rank[rank][step]["batch"]) for rank in range(2)]
        assert per_rank[0][step]["epoch"] == per_rank[1][step]["epoch"] == step // 3
        union = [q for part in local for q in part["query"]]
        assert union == [f"q{i}" for i in epochs[step // 3][step % 3]]
        assert local[0]["hard_negatives"] == [rows[int(q[1:])]["hard_negatives"] for q in local[0]["query"]]

