"""CoSENT and cosine-MSE losses by hand, and the STS objective learning a toy batch (no Ray)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lmplatform.config.loader import ConfigError
from lmplatform.objectives.run_config import load_run_config
from lmplatform.objectives.sts.objective import STSEvaluator, build_recipe, cosent_loss, cosine_mse_loss, read_sts_data
from lmplatform.train.loop import evaluation_mode


def test_cosent_matches_hand_computation() -> None:
    cos = torch.tensor([0.9, 0.2, 0.5], dtype=torch.float64)
    gold = torch.tensor([5.0, 1.0, 3.0], dtype=torch.float64)
    # ordered pairs with gold_i > gold_j: (0,1), (0,2), (2,1); terms 20*(cos_j - cos_i)
    terms = [20 * (0.2 - 0.9), 20 * (0.5 - 0.9), 20 * (0.2 - 0.5)]
    expected = math.log(1 + sum(math.exp(t) for t in terms))
    assert float(cosent_loss(cos, gold, 20.0)) == pytest.approx(expected, rel=1e-5)
    # a wrongly ordered pair costs more than a rightly ordered one
    assert (float(cosent_loss(torch.tensor([0.2, 0.9]), torch.tensor([5.0, 1.0])))
            > float(cosent_loss(torch.tensor([0.9, 0.2]), torch.tensor([5.0, 1.0]))))
    # ties contribute nothing: log(1 + 0) = 0
    assert float(cosent_loss(torch.tensor([0.1, 0.7]), torch.tensor([2.0, 2.0]))) == 0.0
    assert float(cosine_mse_loss(torch.tensor([0.5, 1.0]), torch.tensor([0.0, 5.0]), (0.0, 5.0))) == pytest.approx(0.125)


def test_sts_objective_decreases_on_a_toy_batch(tiny_bert: Path, tmp_path: Path) -> None:
    rows = [
        {"sentence1": "disk full on server", "sentence2": "server disk is full", "score": 5.0},
        {"sentence1": "vpn tunnel down", "sentence2": "printer out of paper", "score": 0.0},
        {"sentence1": "login failed", "sentence2": "user cannot login", "score": 4.0},
        {"sentence1": "payment gateway timeout", "sentence2": "mobile app screen crash", "score": 1.0},
        {"sentence1": "backup queue stuck", "sentence2": "backup queue is stuck", "score": 4.5},
        {"sentence1": "certificate expired", "sentence2": "memory error", "score": 0.5},
        {"sentence1": "bad row"},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=16", f"data.train_paths={path}",
                                 "data.validation_fraction=0", "objective.name=sts"])
    torch.manual_seed(0)  # dropout draws: the result must not depend on what earlier tests drew
    recipe = build_recipe(cfg)
    batch = recipe.collate({k: [r[k] for r in rows[:6]] for k in ("sentence1", "sentence2", "score")})
    optimizer = torch.optim.AdamW(recipe.parameters(), lr=1e-3)
    losses = []
    recipe.model.train()
    for _ in range(15):
        loss, _ = recipe.objective(recipe.model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    with evaluation_mode(recipe.model):  # as the training loop calls evaluators
        metrics = STSEvaluator()(recipe.model, [batch])
    assert metrics["spearman"][1] == 6 and metrics["spearman"][0] / 6 > 0.8
    assert recipe.count_tokens(batch) == int(batch["attention_mask_a"].sum() + batch["attention_mask_b"].sum())


def test_sts_config_and_bad_rows(tiny_bert: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scale"):
        load_run_config(None, ["data.train_paths=x", "objective.name=sts", "objective.scale=[5,1]"])
    with pytest.raises(ConfigError, match="loss"):
        load_run_config(None, ["data.train_paths=x", "objective.name=sts", "objective.loss=hinge"])
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "score": 3}) + "\n"
                    + json.dumps({"sentence1": "a", "sentence2": "b", "score": 9}) + "\n")
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", f"data.train_paths={path}", "data.validation_fraction=0",
                                 "objective.name=sts"])
    data = read_sts_data(cfg)
    assert [ex["score"] for ex in data.train] == [3.0]
    assert data.bad_examples == [f"{path}:2: score outside the scale (9 not in [0.0, 5.0])"]
