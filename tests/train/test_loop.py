"""The loop owns validation: every batch an evaluator sees went through the loop's placement on the
device, with the model in eval mode under inference mode, for every objective's real evaluator.

No GPU is needed to catch a batch that skips the move: a spy on `place` records each tensor it
returns, and a check around the real evaluator requires each tensor it receives to be one of them.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pytest
import torch

from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import load_run_config
from lmplatform.train import loop
from lmplatform.train.loop import FolderReporter, Trainer
from lmplatform.train.recipe import Batch
from tests.conftest import TOKEN_WORDS


def _column(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(TOKEN_WORDS) for _ in range(rng.randint(low, high)))


def _rows(objective: str, rng: random.Random) -> dict[str, np.ndarray]:
    """One Ray Data numpy batch of 4 rows for the objective's collator."""
    n = 4
    if objective in ("mlm", "declutr", "classifier"):
        out = {"text": _column([_words(rng, 20, 30) for _ in range(n)])}
        if objective == "classifier":
            out["label"] = np.array([i % 2 for i in range(n)])
        return out
    if objective == "biencoder":
        return {"query": _column([_words(rng, 3, 5) for _ in range(n)]),
                "document": _column([_words(rng, 3, 6) for _ in range(n)]),
                "hard_negatives": _column([[_words(rng, 3, 6)] for _ in range(n)])}
    if objective == "cross_encoder":
        return {"query": _column([_words(rng, 3, 5) for _ in range(n)]),
                "document": _column([_words(rng, 3, 6) for _ in range(n)]),
                "negatives": _column([[_words(rng, 3, 6), _words(rng, 3, 6)] for _ in range(n)])}
    assert objective == "sts"
    return {"sentence1": _column([_words(rng, 3, 6) for _ in range(n)]),
            "sentence2": _column([_words(rng, 3, 6) for _ in range(n)]),
            "score": np.array([0.5, 1.0, 2.5, 4.0])}


OVERRIDES = {
    "mlm": ["objective.pseudo_perplexity_sentences=2"],
    "declutr": ["objective.min_span=2", "objective.max_span=4"],
    "biencoder": ["data.hard_negative_field=hard_negatives", "objective.learnable_temperature=true"],
    "cross_encoder": [],
    "sts": [],
    "classifier": ["objective.labels=[a, b]"],
}


@pytest.mark.parametrize("objective", sorted(OVERRIDES))
def test_evaluators_get_placed_batches_in_eval_and_inference_mode(
    objective: str, tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", "data.train_paths=[unused.jsonl]",
                                 f"objective.name={objective}", "optim.max_steps=1", *OVERRIDES[objective]])
    recipe = objective_spec(objective).build_recipe(cfg)
    trainer = Trainer(cfg, recipe, 1, torch.device("cpu"), 0, reporter=FolderReporter(tmp_path))

    placed: list[torch.Tensor] = []  # kept alive, so no id is reused by another tensor
    real_place = loop.place

    def spy(batch: Batch, device: torch.device) -> Batch:
        out = real_place(batch, device)
        placed.extend(v for v in out.values() if torch.is_tensor(v))
        return out

    monkeypatch.setattr(loop, "place", spy)
    real_evaluate = recipe.evaluate
    seen = {"batches": 0, "modes": set()}

    def checked(batches: Iterable[Batch]) -> Iterator[Batch]:
        for batch in batches:
            placed_ids = {id(t) for t in placed}
            assert all(id(v) in placed_ids for v in batch.values() if torch.is_tensor(v)), "a batch skipped the placement"
            seen["batches"] += 1
            seen["modes"].add((trainer.model.training, trainer.objective.training, torch.is_inference_mode_enabled()))
            yield batch

    def evaluate(model: torch.nn.Module, batches: Iterable[Batch], rank: int) -> Any:
        return real_evaluate(model, checked(batches), rank)

    recipe.evaluate = evaluate
    rng = random.Random(0)
    make: Callable[[], Iterator[Batch]] = lambda: (recipe.collate(_rows(objective, rng)) for _ in range(2))

    metrics = trainer.evaluate(make())
    assert metrics and all(np.isfinite(v) for v in metrics.values())
    assert seen["batches"] == 2 and seen["modes"] == {(False, False, True)}
    assert trainer.model.training and trainer.objective.training  # training mode is back afterwards
