"""The study's searcher: Optuna's TPE through Ray Tune, told only of the reports that carry its metric."""
from __future__ import annotations

from typing import Any

from ray.tune.search.optuna import OptunaSearch


class FinalMetricOptunaSearch(OptunaSearch):
    """OptunaSearch that passes Optuna only the reports carrying the study's metric: a pipeline trial reports its
    training stage's metrics (for ASHA) long before its own metric, a pipeline evaluation, exists.

    After `Tuner.restore` it also hears from trials it cannot place: one suggested after the searcher's last
    checkpoint (Optuna never saw it; OptunaSearch raised KeyError on its first report), or one that errored, was
    told to Optuna as failed, and runs again. Their reports are not Optuna's to use (pruning is the scheduler's job);
    the study still ranks them, from Tune's results, when it picks its champion."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if isinstance(self.metric, str) and self.metric not in result:
            return
        if trial_id not in self._ot_trials or trial_id in self._completed_trials:
            return
        super().on_trial_result(trial_id, result)
