"""The study's searcher: Optuna's TPE through Ray Tune, told only of the reports that carry its metric."""
from __future__ import annotations

from typing import Any

from ray.tune.search.optuna import OptunaSearch


class FinalMetricOptunaSearch(OptunaSearch):
    """OptunaSearch that passes Optuna only the reports carrying the study's metric: a pipeline trial reports its
    training stage's metrics (for ASHA) long before its own metric, a pipeline evaluation, exists."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if isinstance(self.metric, str) and self.metric not in result:
            return
        super().on_trial_result(trial_id, result)
