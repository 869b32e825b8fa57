"""The study's searcher: Optuna's TPE through Ray Tune, told only of the reports that carry its metric."""
from __future__ import annotations

import logging
from typing import Any

from ray.tune.search.optuna import OptunaSearch
from ray.tune.utils.util import flatten_dict

logger = logging.getLogger(__name__)


class FinalMetricOptunaSearch(OptunaSearch):
    """OptunaSearch that passes Optuna only the reports carrying the study's metric: a pipeline trial reports its
    training stage's metrics (for ASHA) long before its own metric, a pipeline evaluation, exists.

    It also accepts trials it never suggested. After `Tuner.restore` the experiment state can be newer than the
    searcher's checkpoint, and a trial suggested between the two would otherwise raise KeyError on its first report.
    Such a trial's reports are skipped (pruning is the scheduler's job) and its final result is told to Optuna as an
    evaluated point, read back from the trial's config."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if isinstance(self.metric, str) and self.metric not in result:
            return
        if trial_id not in self._ot_trials:
            return
        super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        if trial_id not in self._ot_trials and trial_id not in self._completed_trials:
            params = _trial_params(result or {}, self._space)
            if params is None:
                logger.warning("trial %s was restored past the searcher's checkpoint without its config; Optuna skips it",
                               trial_id)
                self._completed_trials.add(trial_id)
                return
            self._ot_trials[trial_id] = self._ask_for(params)
        super().on_trial_complete(trial_id, result=result, error=error)

    def _ask_for(self, params: dict[str, Any]) -> Any:
        """An Optuna trial holding given parameter values: enqueued, asked for, and suggested through the space."""
        self._ot_study.enqueue_trial(params)
        if isinstance(self._space, dict):
            return self._ot_study.ask(fixed_distributions=self._space)
        ot_trial = self._ot_study.ask()
        self._space(ot_trial)
        return ot_trial


def _trial_params(result: dict[str, Any], space: Any) -> dict[str, Any] | None:
    """The searched parameters in a trial's result (Tune flattens its config to 'config/<name>' keys)."""
    if isinstance(result.get("config"), dict):
        config = flatten_dict(result["config"], delimiter="/")
    else:
        config = {k[len("config/"):]: v for k, v in result.items() if k.startswith("config/")}
    names = list(space) if isinstance(space, dict) else list(getattr(space, "parameters", config))
    params = {name: config[name] for name in names if name in config}
    return params or None
