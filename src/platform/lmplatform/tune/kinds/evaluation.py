"""Evaluation trials (`trial: evaluation`, `base_evaluation:`): each trial runs a registered evaluation with its
values (tune/evaluation_trial.py); parameters address the evaluation config's fields, a list's entries by name."""
from __future__ import annotations

from typing import Any, Callable

from lmplatform.evaluation.config import EvaluationConfig, load_evaluation_config
from lmplatform.tune.space import LoadedSpace, SpaceError, SpaceLines, check_values, load_base, target_keys, where
from lmplatform.tune.trial_spec import StudyRun


def check(loaded: LoadedSpace, lines: SpaceLines) -> EvaluationConfig:
    """Every parameter must address a field of the base evaluation config with each sampled value; every target must
    name one of its tasks and that task's datasets (a report's metrics are <task>.<dataset>...)."""
    space, source = loaded.space, loaded.path
    base, with_override = load_base(loaded, lines, "the base evaluation", load_evaluation_config)
    for name, param in space.parameters.items():
        check_values(loaded, lines, name, param, f"the base evaluation {space.base_evaluation}", with_override)
    datasets = {task.task: [ds.name for ds in task.datasets] for task in base.tasks}
    for key, metric in target_keys(space):
        task, _, rest = metric.partition(".")
        if task not in datasets or rest.partition(".")[0] not in datasets[task]:
            raise SpaceError(f"{where(source, lines, key)}: metric {metric!r} is not one {space.base_evaluation} "
                             "reports: its metrics are <task>.<dataset>..., with "
                             + "; ".join(f"task {t}: datasets {', '.join(names)}" for t, names in datasets.items()))
    return base


def tracking(loaded: LoadedSpace) -> Any:
    return loaded.base.tracking


def trainable(loaded: LoadedSpace, study: StudyRun) -> Callable[..., Any]:
    from ray import tune

    from lmplatform.tune.evaluation_trial import evaluation_trial

    return tune.with_parameters(evaluation_trial, base_evaluation=str(loaded.base_path),
                                overrides=loaded.base_overrides, study=study)
