"""optim.early_stopping: the run ends after `patience` validations without improvement, keeps its final
checkpoint and model, and a bad rule is refused with the field named."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from lmplatform.config.loader import ConfigError
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import load_run_config
from lmplatform.train.early_stopping import improves
from lmplatform.train.ingest import resume_batches
from lmplatform.train.loop import FolderReporter, Trainer
from lmplatform.train.state import FINAL_MODEL_DIR
from tests.conftest import text_batches


def test_improves_in_the_direction_of_the_mode_by_more_than_min_delta() -> None:
    assert improves(5.0, None, "min", 0.1)
    assert improves(4.8, 5.0, "min", 0.1) and not improves(4.95, 5.0, "min", 0.1) and not improves(5.2, 5.0, "min", 0.0)
    assert improves(0.72, 0.70, "max", 0.01) and not improves(0.705, 0.70, "max", 0.01) and not improves(0.6, 0.7, "max", 0.0)
    assert not improves(float("nan"), None, "min", 0.0) and not improves(float("nan"), 1.0, "max", 0.0)



def _mlm_trainer(tiny_bert: Path, tmp_path: Path, *overrides: str) -> tuple[Trainer, FolderReporter, Any]:
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", "data.train_paths=[unused.jsonl]",
                                 "objective.name=mlm", "objective.pseudo_perplexity_sentences=0", "optim.max_steps=40",
                                 "tracking.eval_every_n_steps=2", "checkpoint.every_n_steps=1000", *overrides])
    reporter = FolderReporter(tmp_path / "checkpoints")
    trainer = Trainer(cfg, objective_spec("mlm").build_recipe(cfg), cfg.optim.max_steps, torch.device("cpu"), 0,
                      reporter=reporter)
    trainer.begin(None)
    return trainer, reporter, cfg


def _fit(trainer: Trainer) -> dict[str, float]:
    rng = random.Random(0)
    train, validation = text_batches(rng, 8, 4, (20, 30)), text_batches(rng, 2, 4, (20, 30))
    collate = trainer.recipe.collate

    def train_batches(epoch: int, skip: int) -> Iterator[Any]:
        return resume_batches(train, collate, skip)

    return trainer.fit(train_batches, lambda: (collate(b) for b in validation))


def test_a_flat_validation_metric_stops_the_run_after_patience_validations(tiny_bert: Path, tmp_path: Path) -> None:
    # lr so small the weights do not move: the fixed-mask validation loss stays where it started
    trainer, reporter, _ = _mlm_trainer(tiny_bert, tmp_path, "optim.lr=1e-30", "optim.early_stopping.metric=val_mlm_loss",
                                        "optim.early_stopping.patience=2")
    summary = _fit(trainer)
    assert trainer.progress.step == 4  # validations at steps 2 and 4 did not beat step 0's
    assert summary["early_stopped_at_step"] == 4 and trainer.progress.best_step == 0
    assert trainer.progress.validations_since_best == 2
    assert reporter.checkpoints and reporter.checkpoints[-1].name.endswith("_final")
    assert (reporter.checkpoints[-1] / FINAL_MODEL_DIR / "config.json").exists()


def test_an_improving_metric_runs_to_the_step_budget(tiny_bert: Path, tmp_path: Path) -> None:
    # the metric must fall by more than 1e9 to count: never, so patience 100 is never reached either
    trainer, _, _ = _mlm_trainer(tiny_bert, tmp_path, "optim.max_steps=6", "optim.early_stopping.metric=val_mlm_loss",
                                 "optim.early_stopping.patience=100", "optim.early_stopping.min_delta=1e9")
    summary = _fit(trainer)
    assert trainer.progress.step == 6 and "early_stopped_at_step" not in summary


def test_a_metric_the_run_does_not_report_is_refused_at_the_first_validation(tiny_bert: Path, tmp_path: Path) -> None:
    trainer, _, _ = _mlm_trainer(tiny_bert, tmp_path, "optim.early_stopping.metric=val_ir_mrr_at_10")
    with pytest.raises(ValueError, match=r"optim.early_stopping.metric='val_ir_mrr_at_10'.*val_mlm_loss"):
        _fit(trainer)
    assert trainer.progress.step == 0


@pytest.mark.parametrize("overrides, named", [
    (["optim.early_stopping.metric=val_mlm_loss"], "tracking.eval_every_n_steps"),
    (["tracking.eval_every_n_steps=10", "optim.early_stopping.metric=mlm_loss"], "optim.early_stopping.metric"),
    (["tracking.eval_every_n_steps=10", "optim.early_stopping.metric=val_mlm_loss", "optim.early_stopping.mode=lowest"],
     "optim.early_stopping.mode"),
])
def test_a_bad_rule_is_refused_before_training_naming_the_field(overrides: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_run_config(None, ["data.train_paths=[unused.jsonl]", *overrides])


def _scripted_validation(trainer: Trainer, values: dict[int, float], weights_at: dict[int, dict]) -> None:
    """Validation returns `values[step]` as val_mlm_loss and records the weights it saw at each step."""
    def evaluate(batches: Any) -> dict[str, float]:
        step = trainer.progress.step
        weights_at.setdefault(step, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
        trainer.latest_validation = {"val_mlm_loss": values[step]}
        return dict(trainer.latest_validation)

    trainer.evaluate = evaluate  # type: ignore[method-assign]


def test_keep_best_restores_the_best_validations_weights_and_a_checkpoint_carries_them(tiny_bert: Path, tmp_path: Path) -> None:
    trainer, reporter, cfg = _mlm_trainer(tiny_bert, tmp_path, "optim.lr=1e-3", "optim.early_stopping.metric=val_mlm_loss",
                                          "optim.early_stopping.patience=2", "optim.early_stopping.keep=best",
                                          "checkpoint.every_n_steps=4")
    weights_at: dict[int, dict] = {}
    _scripted_validation(trainer, {0: 5.0, 2: 4.0, 4: 4.5, 6: 4.6}, weights_at)
    summary = _fit(trainer)
    assert trainer.progress.step == 6 and summary["early_stopped_at_step"] == 6
    assert summary["early_stopping_kept_step"] == 2
    assert not all(torch.equal(weights_at[2][k], weights_at[6][k]) for k in weights_at[2])  # training moved them
    final = trainer.model.state_dict()
    assert all(torch.equal(final[k], weights_at[2][k]) for k in final)  # the exported model is step 2's

    # the checkpoint of step 4 holds step 2's weights: a run resumed from it still ends with them
    step4 = next(c for c in reporter.checkpoints if "step00000004" in c.name)
    resumed = Trainer(cfg, objective_spec("mlm").build_recipe(cfg), cfg.optim.max_steps, torch.device("cpu"), 0,
                      reporter=FolderReporter(tmp_path / "resumed"))
    resumed.begin(step4)
    assert resumed.progress.best_step == 2 and resumed.progress.validations_since_best == 1
    assert resumed.best_weights is not None and all(torch.equal(resumed.best_weights[k], weights_at[2][k]) for k in final)


@pytest.mark.parametrize("field, value", [("metric", "val_mlm_loss\x00"), ("metric", "val_\ud800"),
                                          ("mode", "min\x07"), ("keep", "best\ud800")])
def test_control_characters_and_surrogates_in_the_rule_are_refused_naming_the_field(field: str, value: str) -> None:
    rule = {"metric": "val_mlm_loss", field: value}
    with pytest.raises(ConfigError, match=rf"optim\.early_stopping\.{field}"):
        load_run_config(None, ["data.train_paths=[unused.jsonl]", "tracking.eval_every_n_steps=10"],
                        base={"optim": {"early_stopping": rule}})


def test_validate_at_start_false_skips_the_start_validation_unless_early_stopping_needs_it(
        tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_evaluate = Trainer.evaluate

    def counted(self: Trainer, batches: Any) -> dict[str, float]:
        calls.append(self.progress.step)
        return real_evaluate(self, batches)

    monkeypatch.setattr(Trainer, "evaluate", counted)
    trainer, _, _ = _mlm_trainer(tiny_bert, tmp_path / "skip", "optim.max_steps=4", "tracking.validate_at_start=false")
    summary = _fit(trainer)
    assert calls == [2, 4] and not any(k.endswith("_initial") for k in summary)

    calls.clear()
    trainer, _, _ = _mlm_trainer(tiny_bert, tmp_path / "stop", "optim.max_steps=4", "tracking.validate_at_start=false",
                                 "optim.early_stopping.metric=val_mlm_loss", "optim.early_stopping.patience=5")
    summary = _fit(trainer)
    assert calls == [0, 2, 4] and "val_mlm_loss_initial" in summary  # early stopping's first best is the start


@pytest.mark.parametrize("value", ["maybe", "yes\x00", "\ud800", "2"])
def test_a_bad_validate_at_start_is_refused_naming_the_field(value: str) -> None:
    with pytest.raises(ConfigError, match=r"tracking\.validate_at_start"):
        load_run_config(None, ["data.train_paths=[unused.jsonl]"], base={"tracking": {"validate_at_start": value}})
