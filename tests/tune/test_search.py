"""The study's searcher after a restore: reports of trials it cannot place are not a KeyError nor a warning."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lmplatform.tune.search import FinalMetricOptunaSearch
from lmplatform.tune.space import define_by_run, load_space

from .test_space import GOOD, _space


def test_reports_of_trials_restored_past_the_searchers_state_are_left_out(
    tmp_path: Path, corpus_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    searcher = FinalMetricOptunaSearch(space=define_by_run(load_space(_space(tmp_path, corpus_file, GOOD))),
                                       metric="val_mlm_loss", mode="min")
    searcher.suggest("errored")
    searcher.on_trial_result("errored", {"val_mlm_loss": 3.0, "training_iteration": 1})
    searcher.on_trial_complete("errored", None, error=True)
    searcher.suggest("kept")

    with caplog.at_level(logging.WARNING):
        searcher.on_trial_result("never-suggested", {"val_mlm_loss": 2.0, "training_iteration": 1})
        searcher.on_trial_result("errored", {"val_mlm_loss": 2.0, "training_iteration": 2})  # resumed after restore
        searcher.on_trial_result("kept", {"training_iteration": 1})  # no metric yet
        searcher.on_trial_result("kept", {"val_mlm_loss": 1.5, "training_iteration": 2})
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    ot_trials = {t.number: t for t in searcher._ot_study.get_trials(deepcopy=False)}
    assert ot_trials[0].state.name == "FAIL" and ot_trials[0].intermediate_values == {1: 3.0}
    assert ot_trials[1].intermediate_values == {2: 1.5}
