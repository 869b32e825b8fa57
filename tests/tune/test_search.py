"""The study's searcher after a restore: trials it never suggested are told to Optuna, not a KeyError."""
from __future__ import annotations

from pathlib import Path

from lmplatform.tune.search import FinalMetricOptunaSearch
from lmplatform.tune.space import define_by_run, load_space

from .test_space import GOOD, _space


def _searcher(tmp_path: Path, corpus: Path) -> FinalMetricOptunaSearch:
    loaded = load_space(_space(tmp_path, corpus, GOOD))
    return FinalMetricOptunaSearch(space=define_by_run(loaded), metric="val_mlm_loss", mode="min")


def test_a_trial_restored_past_the_searchers_checkpoint_is_told_to_optuna_with_its_config(
    tmp_path: Path, corpus_file: Path
) -> None:
    searcher = _searcher(tmp_path, corpus_file)
    suggested = searcher.suggest("a")
    assert set(suggested) == {"optim.lr", "objective.mask_probability"}
    config = {"config/optim.lr": 3e-4, "config/objective.mask_probability": 0.25}

    searcher.on_trial_result("restored", {"val_mlm_loss": 2.0, "training_iteration": 1, **config})
    searcher.on_trial_complete("restored", {"val_mlm_loss": 1.5, "training_iteration": 2, **config})
    searcher.on_trial_complete("a", {"val_mlm_loss": 2.5, "training_iteration": 2, "config/optim.lr": 1e-4})

    done = {t.value: t.params for t in searcher._ot_study.trials}
    assert done[1.5] == {"optim.lr": 3e-4, "objective.mask_probability": 0.25}  # the restored trial's own point
    assert done[2.5] == suggested
    assert searcher._ot_study.best_value == 1.5


def test_a_restored_trial_without_its_metric_is_pruned_and_one_that_failed_is_failed(
    tmp_path: Path, corpus_file: Path
) -> None:
    import optuna

    searcher = _searcher(tmp_path, corpus_file)
    config = {"config": {"optim.lr": 3e-4, "objective.mask_probability": 0.25}}
    searcher.on_trial_complete("stopped", {"training_iteration": 1, **config})
    searcher.on_trial_complete("crashed", {**config}, error=True)
    searcher.on_trial_complete("crashed", {**config}, error=True)  # told once
    states = [t.state for t in searcher._ot_study.trials]
    assert states == [optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL]
