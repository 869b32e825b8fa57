"""Early stopping: a run ends once a validation metric has gone `patience` validations without improving.

The state lives in the run's `Progress` (best value, its step, validations since), so it is checkpointed
with the run and a resumed run counts on from where it stopped. Every worker reads the same validation
metrics (they are reduced over workers), so every worker stops at the same step.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

from lmplatform.config.schema import EarlyStoppingConfig
from lmplatform.train.state import Progress


def improves(value: float, best: Optional[float], mode: Literal["min", "max"], min_delta: float) -> bool:
    """True when `value` beats `best` by more than `min_delta` in the direction of `mode`; any finite value
    beats no best yet, and NaN never improves."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if mode == "min" else value > best + min_delta


def plateaued(rule: EarlyStoppingConfig, metrics: dict[str, float], progress: Progress) -> bool:
    """Record one validation in `progress`; True when the metric has now gone `rule.patience` validations
    without improving on its best."""
    if rule.metric not in metrics:
        reported = ", ".join(sorted(metrics)) or "none (the run has no validation data)"
        raise ValueError(f"optim.early_stopping.metric={rule.metric!r} is not a validation metric of this run; "
                         f"it reports: {reported}")
    value = metrics[rule.metric]
    if improves(value, progress.best_metric, rule.mode, rule.min_delta):
        progress.best_metric, progress.best_step, progress.validations_since_best = value, progress.step, 0
        return False
    progress.validations_since_best += 1
    return progress.validations_since_best >= rule.patience
