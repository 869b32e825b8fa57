"""Group-aware batches on two real Ray Train workers: at every step, the two workers' local batches
together are one conflict-free global batch, read through the worker's own batch source.

The driver side is the bi-encoder's `prepare_data`; each worker reads its batches with
`train_batch_source` (what `train_loop_per_worker` hands the loop) and writes the texts it got, so the
test sees what the workers saw. No model is trained: the loop's use of these batches is the same
`train_batches(epoch, skip)` every objective goes through.
"""
from __future__ import annotations

import json
import secrets
from itertools import combinations
from pathlib import Path
from typing import Any

from lmplatform.data.group_batches import pair_conflict_keys
from lmplatform.data.pairs import read_pairs
from lmplatform.jobs.ingest import ingest_config
from lmplatform.objectives.biencoder.group_batches import plan_epochs
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import load_run_config


def _write_groups(path: Path) -> Path:
    """Duplicate chains (r0 dup r1, r1 dup r2, ...) of 1 to 4 pairs each, and a text shared by two groups' pairs."""
    rows = []
    for group, size in enumerate([4, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]):
        rows += [{"query": f"report {group}-{i} printer crash", "document": f"report {group}-{i + 1} printer crash"}
                 for i in range(size)]
    rows.append({"query": "crash after update", "document": "report 13-0 printer crash"})  # joins group 13's text
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _probe(config: dict[str, Any]) -> None:
    import ray.train

    from lmplatform.jobs.train_worker import train_batch_source
    from lmplatform.objectives.run_config import RunConfig

    rank = ray.train.get_context().get_world_rank()
    cfg = RunConfig.model_validate(config["cfg"])
    batches = train_batch_source(cfg, rank, True, lambda b: [[str(q), str(d)] for q, d in zip(b["query"], b["document"])])
    seen = [list(batches(epoch, 0)) for epoch in range(config["epochs"])]
    resumed = list(batches(1, 2))  # a run resumed after 2 batches of epoch 1
    (Path(config["out"]) / f"rank{rank}.json").write_text(json.dumps({"seen": seen, "resumed": resumed}))


def test_two_workers_local_batches_make_conflict_free_global_batches(ray_session, tmp_path: Path) -> None:
    from ray.train import RunConfig as RayRunConfig
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    cfg = load_run_config(None, [
        f"data.train_paths={_write_groups(tmp_path / 'pairs.jsonl')}", "data.validation_fraction=0",
        "objective.name=biencoder", "objective.group_aware_batches=true",
        "scaling.num_workers=2", "optim.batch_size=3", "optim.epochs=2",
    ])
    data = objective_spec("biencoder").prepare_data(cfg)
    assert data.planned_batches and set(data.datasets) == {"train_rank0", "train_rank1"}
    epochs = int(data.metrics["data/group_batches_epochs"])
    # short tail batches: 2 epochs of steps need a third
    assert epochs >= 2 and data.metrics["data/group_batches_deferred_rows"] > 0
    assert "group-aware batches of 3 x 2 worker(s): 25 pairs in 14 duplicate groups" in data.summary

    out = tmp_path / "seen"
    out.mkdir()
    TorchTrainer(
        _probe,
        train_loop_config={"cfg": cfg.model_dump(mode="json"), "epochs": epochs, "out": str(out)},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        datasets=data.datasets,
        dataset_config=ingest_config(),
        run_config=RayRunConfig(name=f"group-batches-{secrets.token_hex(2)}", storage_path=str(tmp_path / "runs")),
    ).fit()

    ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    pair_set = read_pairs(cfg.data)
    pairs = pair_set.train
    keys = pair_conflict_keys(pairs)[0]
    orders = plan_epochs(pair_set, keys, [frozenset()] * len(pairs), cfg)  # what the driver planned
    key_of = dict(zip([(p.query, p.document) for p in pairs], keys))
    for epoch, order in enumerate(orders):
        steps = [rank["seen"][epoch] for rank in ranks]
        assert len(steps[0]) == len(steps[1]) == len(order.batches)  # every step has a local batch on both workers
        for local0, local1, planned in zip(*steps, order.batches):
            assert 1 <= len(local1) <= len(local0) <= 3
            global_batch = [tuple(row) for row in local0 + local1]
            assert global_batch == [(pairs[i].query, pairs[i].document) for i in planned]
            conflicts = [(a, b) for a, b in combinations(global_batch, 2) if key_of[a] & key_of[b]]
            assert not conflicts, f"epoch {epoch}: co-batched {conflicts}"
        assert sorted([i for batch in order.batches for i in batch] + order.dropped_rows) == list(range(len(pairs)))
    assert ranks[0]["seen"][0] != ranks[0]["seen"][1]  # another order in the next epoch
    assert all(rank["resumed"] == rank["seen"][1][2:] for rank in ranks)
