"""A learnable temperature learns: log τ has its own AdamW group and learning rate (`objective.temperature_lr`).

At the encoder's rate (2e-5 to 3e-5 in the shipped configs) Adam moves log τ by about that much per step, so
τ changed by under 0.2% over a whole run. The shipped settings are trained here for a few steps (tiny BERT,
the loop without Ray) at the default temperature_lr and at the encoder's rate, and τ's travel compared.
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch

from lmplatform.config.schema import OptimConfig
from lmplatform.objectives.infonce import Temperature
from lmplatform.objectives.run_config import RunConfig, load_run_config
from lmplatform.objectives.trainer import build_trainer
from lmplatform.train.ingest import resume_batches
from lmplatform.train.loop import FolderReporter
from lmplatform.train.optim import build_optimizer, build_scheduler
from lmplatform.train.recipe import Batch
from tests.conftest import TOKEN_WORDS

ROOT = Path(__file__).resolve().parents[2]
STEPS = 10


def test_log_tau_gets_its_own_group_without_weight_decay() -> None:
    encoder = torch.nn.Linear(4, 4)
    tau = Temperature(0.05, learnable=True)
    params = [*encoder.parameters(), tau.log_tau]
    names = {id(encoder.weight): "weight", id(encoder.bias): "bias", id(tau.log_tau): "temperature.log_tau"}
    cfg = OptimConfig(lr=2e-5, weight_decay=0.01, max_steps=10, warmup_steps=0)
    optimizer = build_optimizer(params, names, cfg, {"temperature.log_tau": 1e-2})
    by_params = {tuple(id(p) for p in g["params"]): (g["lr"], g["weight_decay"]) for g in optimizer.param_groups}
    assert by_params == {(id(encoder.weight),): (2e-5, 0.01), (id(encoder.bias),): (2e-5, 0.0), (id(tau.log_tau),): (1e-2, 0.0)}
    # the schedule scales each group's own rate
    scheduler = build_scheduler(optimizer, cfg, 10)
    optimizer.step()
    scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([2e-5 * 0.9, 2e-5 * 0.9, 1e-2 * 0.9])
    with pytest.raises(ValueError, match="not trained: temperature.log_tau"):
        build_optimizer(list(encoder.parameters()), names, cfg, {"temperature.log_tau": 1e-2})


def test_projection_keeps_log_tau_in_range_and_the_gradient_alive() -> None:
    tau = Temperature(0.05, learnable=True, min_value=0.01, max_value=1.0)
    with torch.no_grad():
        tau.log_tau.fill_(math.log(1e-4))  # an optimizer step overshot the lower bound
    assert float(tau().detach()) == pytest.approx(0.01)
    tau.project_()
    assert float(tau.log_tau) == pytest.approx(math.log(0.01))
    (-tau()).backward()  # a loss that wants a larger τ can move it off the bound
    assert float(tau.log_tau.grad) < 0


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(TOKEN_WORDS) for _ in range(rng.randint(low, high)))


def _column(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def _batch(objective: str, size: int, rng: random.Random) -> dict[str, np.ndarray]:
    if objective == "declutr":  # 60-80 words: every document holds 2 anchors of the shipped max_span (12)
        return {"text": _column([_words(rng, 60, 80) for _ in range(size)])}
    queries = [_words(rng, 3, 5) for _ in range(size)]
    return {"query": _column(queries), "document": _column([q + " " + _words(rng, 1, 3) for q in queries]),
            "hard_negatives": _column([[_words(rng, 3, 6)] for _ in range(size)])}


def _tau_travel(cfg: RunConfig, tmp_path: Path) -> float:
    """|Δ log τ| after STEPS optimizer steps of the config (the loop in this process, no validation)."""
    trainer = build_trainer(cfg, STEPS, torch.device("cpu"), 0, reporter=FolderReporter(tmp_path))
    trainer.begin(None)
    temperature = trainer.objective.temperature
    start = float(temperature.log_tau)
    rng = random.Random(0)

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        raw = (_batch(cfg.objective.name, cfg.optim.batch_size, rng) for _ in range(STEPS))
        return resume_batches(raw, trainer.recipe.collate, skip)

    trainer.fit(train_batches, lambda: None)
    return abs(float(temperature.log_tau) - start)


@pytest.mark.parametrize("shipped", ["biencoder.yaml", "declutr.yaml"])
def test_learnable_temperature_moves_at_the_shipped_settings(shipped: str, tiny_bert: Path, tmp_path: Path) -> None:
    overrides = [f"model.name_or_path={tiny_bert}", f"optim.max_steps={STEPS}", "objective.learnable_temperature=true",
                 "scaling.cpus_per_worker=1", "checkpoint.every_n_steps=1000", "tracking.register_model=false"]
    cfg = load_run_config(ROOT / "configs" / shipped, overrides)
    shared = load_run_config(ROOT / "configs" / shipped, overrides + [f"objective.temperature_lr={cfg.optim.lr}"])
    assert cfg.optim.lr <= 3e-5 and cfg.optim.warmup_ratio > 0  # the shipped encoder rate and warm-up

    own, at_encoder_rate = _tau_travel(cfg, tmp_path / "own"), _tau_travel(shared, tmp_path / "shared")
    print(f"{shipped}: |Δ log τ| over {STEPS} steps: {own:.4f} with temperature_lr={cfg.objective.temperature_lr}, "
          f"{at_encoder_rate:.2e} at the encoder's lr {cfg.optim.lr}")
    # Adam's step is about lr per step; the warm-up step has rate 0 and the linear decay averages the rest to
    # half, so an encoder-rate log τ can move at most ~STEPS/2 * lr, a 0.01% change of τ here.
    assert at_encoder_rate <= STEPS / 2 * cfg.optim.lr * 1.5
    # the own rate moves τ by percent, not hundredths of a percent: over 2% in 10 steps
    assert own >= 0.02
