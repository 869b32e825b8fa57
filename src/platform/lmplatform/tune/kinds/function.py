"""Function trials (`trial: function`, `function: module:callable`): each trial calls the function with
`function_args` and its values; each dict it returns or yields is one report. No training run, no model to register."""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator

from lmplatform.tracking.mlflow_tracking import TrackedRun
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG, numeric
from lmplatform.tune.space import LoadedSpace, SpaceError, SpaceLines, import_callable, target_keys, where
from lmplatform.tune.trial_spec import StudyRun


def check(loaded: LoadedSpace, lines: SpaceLines) -> None:
    space, source = loaded.space, loaded.path
    try:
        import_callable(space.function or "")
    except ValueError as exc:
        raise SpaceError(f"{where(source, lines, ('function',))}: function {space.function!r}: {exc}") from None
    if not space.reports:
        raise SpaceError(f"{where(source, lines, ('function',))}: function trials must declare 'reports: [metric, ...]'")
    for key, metric in target_keys(space):
        if metric not in space.reports:
            raise SpaceError(f"{where(source, lines, key)}: metric {metric!r} is not among the function's reports: "
                             f"{', '.join(space.reports)}")
    for name, param in space.parameters.items():
        for cond in param.when:
            if cond not in space.parameters and cond not in space.function_args:
                raise SpaceError(f"{where(source, lines, ('parameters', name, 'when', cond))}: condition on {cond!r}, "
                                 "which is neither a searched parameter nor a function_args entry")


def trainable(loaded: LoadedSpace, study: StudyRun) -> Callable[..., Any]:
    from ray import tune

    return tune.with_parameters(function_trial, function=loaded.space.function,
                                function_args=loaded.space.function_args, study=study)


def _as_iterator(out: Any) -> Iterator[dict[str, Any]]:
    if isinstance(out, dict):
        yield out
    elif isinstance(out, Iterable):
        yield from out
    else:
        raise TypeError(f"a function trial must return a dict of metrics or yield dicts, got {type(out).__name__}")


def function_trial(config: dict[str, Any], *, function: str, function_args: dict[str, Any], study: StudyRun) -> None:
    """One cheap trial: call `function(**function_args, **params)`; each dict it returns or yields is one report."""
    from ray import tune

    # Tune runs each trial in its own folder; relative paths in function_args (data files, the
    # default embedding cache) must mean what they mean for the job, so go back to its directory.
    if os.environ.get("TUNE_ORIG_WORKING_DIR"):
        os.chdir(os.environ["TUNE_ORIG_WORKING_DIR"])
    trial_id = tune.get_context().get_trial_id()
    tracker = TrackedRun.start(study.tracking_uri, study.experiment, f"{study.study}-{trial_id}",
                               {STUDY_TAG: study.study, TRIAL_TAG: trial_id}, study.parent_run_id)
    tracker.log_params({**function_args, **config})
    fn = import_callable(function)
    try:
        for step, metrics in enumerate(_as_iterator(fn(**function_args, **config)), start=1):
            tracker.log_metrics(numeric(metrics), step=step)
            tune.report({**metrics, RUN_ID_KEY: tracker.run_id})
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish()
