"""`data.length_grouping`: rows of similar length share a batch, every row comes once per epoch, and the
grouped order is a pure function of (data order, seed, epoch, rank), so a resumed run's skip lands on it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lmplatform.config import ConfigError
from lmplatform.objectives.run_config import load_run_config
from lmplatform.train.ingest import length_grouped, resume_batches

BATCH, ROWS = 4, 50  # 13 batches, the last one short


def _epoch_batches(epoch: int) -> list[dict[str, np.ndarray]]:
    """What a shard gives for one epoch: a seeded row order in batches (ids, texts of 1-40 words, a label)."""
    rng = np.random.default_rng(0)
    texts = np.array([" ".join(["w"] * int(n)) for n in rng.integers(1, 41, ROWS)], dtype=object)
    order = np.random.default_rng([1, epoch]).permutation(ROWS)
    return [{"id": order[i:i + BATCH], "text": texts[order[i:i + BATCH]], "label": order[i:i + BATCH] % 2}
            for i in range(0, ROWS, BATCH)]


def _grouped(epoch: int, buffer_batches: int = 5, seed: int = 7) -> list[dict[str, np.ndarray]]:
    return list(length_grouped(iter(_epoch_batches(epoch)), BATCH, buffer_batches, seed, epoch, rank=0))


def _padded_slots(batches: list[dict[str, np.ndarray]]) -> int:
    return sum(len(b["text"]) * max(len(t) for t in b["text"]) for b in batches)


def test_every_row_comes_once_per_epoch_in_batches_of_similar_length() -> None:
    for epoch in (0, 1):
        plain, grouped = _epoch_batches(epoch), _grouped(epoch)
        ids = np.concatenate([b["id"] for b in grouped])
        assert sorted(ids.tolist()) == list(range(ROWS))
        assert len(grouped) == len(plain) and sorted(len(b["id"]) for b in grouped) == [2] + [BATCH] * 12
        for batch in grouped:  # the row's columns travel together
            assert (batch["label"] == batch["id"] % 2).all()
        assert _padded_slots(grouped) < 0.8 * _padded_slots(plain)


def test_the_grouped_order_is_fixed_by_seed_epoch_and_rank() -> None:
    def ids(batches: list[dict[str, np.ndarray]]) -> list[list[int]]:
        return [b["id"].tolist() for b in batches]

    assert ids(_grouped(0)) == ids(_grouped(0))
    assert ids(_grouped(0)) != ids(_grouped(1))
    assert ids(_grouped(0)) != ids(_grouped(0, seed=8))
    other_rank = list(length_grouped(iter(_epoch_batches(0)), BATCH, 5, 7, 0, rank=1))
    assert sorted(map(sorted, ids(other_rank))) == sorted(map(sorted, ids(_grouped(0))))  # same groups,
    assert ids(other_rank) != ids(_grouped(0))  # another order


@pytest.mark.parametrize("skip", [0, 4, 11])
def test_a_resumed_epoch_continues_with_the_same_batches(skip: int) -> None:
    uninterrupted = [b["id"].tolist() for b in _grouped(1)]
    resumed = resume_batches(length_grouped(iter(_epoch_batches(1)), BATCH, 5, 7, 1, rank=0),
                             lambda batch: batch["id"].tolist(), skip)
    assert list(resumed) == uninterrupted[skip:]


def test_length_grouping_config_errors_name_the_field(tiny_bert: Path) -> None:
    base = [f"model.name_or_path={tiny_bert}", "data.train_paths=[unused.jsonl]"]
    cfg = load_run_config(None, [*base, "data.length_grouping={buffer_batches: 16}", "data.prefetch=true"])
    assert cfg.data.length_grouping.buffer_batches == 16 and cfg.data.prefetch
    with pytest.raises(ConfigError, match=r"data\.length_grouping\.buffer_batches"):
        load_run_config(None, [*base, "data.length_grouping={buffer_batches: 1}"])
