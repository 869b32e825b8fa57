"""The driver's plan of group-aware batches with `data.length_grouping`: still conflict-free, every pair
once per epoch, and batches of similar length, measured the way the plan measures a pair."""
from __future__ import annotations

import json
import random
from pathlib import Path

from lmplatform.data.group_batches import pair_conflict_keys
from lmplatform.data.pairs import read_pairs
from lmplatform.objectives.biencoder.group_batches import pair_lengths, plan_epochs
from lmplatform.objectives.run_config import load_run_config


def _write_pairs(path: Path) -> Path:
    """120 pairs in duplicate groups of 1 to 3 pairs, texts of 1 to 60 words, a hard negative per pair."""
    rng, rows = random.Random(0), []
    for group in range(60):
        words = rng.randint(1, 60)
        for member in range(rng.randint(1, 3)):
            rows.append({"query": f"g{group} m{member} " + "crash " * words, "document": f"g{group} master " + "printer " * words,
                         "negatives": [f"other {group} {member} " + "font " * rng.randint(1, 60)], "group": f"g{group}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_length_grouped_plan_keeps_groups_apart_and_pads_less(tmp_path: Path) -> None:
    base = [f"data.train_paths={_write_pairs(tmp_path / 'pairs.jsonl')}", "data.validation_fraction=0",
            "data.group_field=group", "data.hard_negative_field=negatives", "objective.name=biencoder",
            "objective.group_aware_batches=true", "objective.max_hard_negatives=1", "optim.batch_size=8",
            "model.max_seq_length=64"]
    plain_cfg = load_run_config(None, base)
    grouped_cfg = load_run_config(None, [*base, "data.length_grouping={buffer_batches: 64}"])
    pairs = read_pairs(plain_cfg.data)
    keys, negative_keys = pair_conflict_keys(pairs.train, max_hard_negatives=1)
    lengths = pair_lengths(pairs.train, 1, 5 * 64)

    def padded(cfg) -> int:
        order = plan_epochs(pairs, keys, negative_keys, cfg)[0]
        for batch in order.batches:
            groups = [pairs.train[i].group for i in batch]
            assert len(set(groups)) == len(groups)
        assert sorted([i for b in order.batches for i in b] + order.dropped_rows) == list(range(len(pairs.train)))
        return sum(len(b) * max(lengths[i] for i in b) for b in order.batches)

    assert padded(grouped_cfg) < 0.75 * padded(plain_cfg)


def test_pair_lengths_count_the_negatives_the_collator_takes_up_to_the_cap(tmp_path: Path) -> None:
    cfg = load_run_config(None, [f"data.train_paths={_write_pairs(tmp_path / 'pairs.jsonl')}",
                                 "data.hard_negative_field=negatives", "objective.name=biencoder"])
    pair = read_pairs(cfg.data).train[0]
    assert pair_lengths([pair], 0, 10_000) == [len(pair.query) + len(pair.document)]
    assert pair_lengths([pair], 1, 10_000) == [len(pair.query) + len(pair.document) + len(pair.hard_negatives[0])]
    assert pair_lengths([pair], 1, 5) == [15]
