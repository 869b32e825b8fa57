"""The cross-encoder trains on a mine stage's output: pairs with their `hard_negatives` and duplicate `group`."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from lmplatform.objectives.run_config import load_run_config

GROUPS = {
    "g1": ["printer jams on tray two", "paper jam in the tray", "tray two jams the paper"],
    "g2": ["vpn drops every hour", "vpn tunnel closes hourly"],
    "g3": ["disk full warning", "backup disk is full"],
    "g4": ["login times out", "login server timeout"],
    "g5": ["invoice totals wrong", "invoice sum is wrong"],
}


def _mined_pairs(path: Path) -> list[dict]:
    """As `mine` writes them: query, document, hard_negatives best first, group. The first row's list holds a text
    of its own group (a hand-made file may), which must never be used as a negative."""
    others = lambda group: [texts[1] for name, texts in GROUPS.items() if name != group]
    rows = []
    for group, texts in GROUPS.items():
        for query in texts[1:]:
            rows.append({"query": query, "document": texts[0], "hard_negatives": others(group)[:3], "group": group})
    rows[0]["hard_negatives"] = [GROUPS["g1"][2], *rows[0]["hard_negatives"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_listwise_objective_reads_a_mine_stages_negatives(ray_session, tiny_bert, tmp_path) -> None:
    from lmplatform.objectives.cross_encoder.objective import build_recipe, prepare_data

    rows = _mined_pairs(tmp_path / "mined.jsonl")
    cfg = load_run_config(None, base={
        "model": {"name_or_path": str(tiny_bert), "max_seq_length": 32},
        "data": {"train_paths": [str(tmp_path / "mined.jsonl")], "validation_fraction": 0.0,
                 "hard_negative_field": "hard_negatives", "group_field": "group"},
        "objective": {"name": "cross_encoder", "loss": "listwise", "negatives_per_positive": 3},
        "checkpoint": {"storage_path": str(tmp_path / "runs")},
    })
    prepared = prepare_data(cfg)
    assert prepared.metrics["data/pairs_with_fewer_negatives"] == 0
    trained = {(r["query"], r["document"]): list(r["negatives"]) for r in prepared.datasets["train"].take_all()}
    assert len(trained) == len(rows)
    for row in rows:
        group = set(GROUPS[row["group"]])
        expected = [n for n in row["hard_negatives"] if n not in group][:3]  # the file's, in its order
        assert trained[(row["query"], row["document"])] == expected
    recipe = build_recipe(cfg)
    batch = recipe.collate(next(iter(prepared.datasets["train"].iter_batches(batch_size=4, batch_format="numpy"))))
    loss, metrics = recipe.objective(recipe.model, batch)
    assert set(metrics) == {"listwise_loss"} and torch.isfinite(loss)
    # an untrained head scores the four texts of a group alike: the loss starts near log(4)
    assert abs(float(loss.detach()) - float(torch.log(torch.tensor(4.0)))) < 0.1
