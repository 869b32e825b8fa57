"""A new kind of study trial is one module and one registration: this module is that module (a toy kind that runs a
command per trial and reads its reports from the command's output, one JSON object a line), and the space's checks,
its CPUs, the tuner and the study's MLflow runs all take it from its spec, with no other change to the package."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pydantic import Field, ValidationError

import lmplatform
from lmplatform.config.base import Section
from lmplatform.tracking.mlflow_tracking import TrackedRun
from lmplatform.tune import trial_kinds
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG
from lmplatform.tune.space import LoadedSpace, SpaceError, SpaceLines, load_space, target_keys, where
from lmplatform.tune.trial_spec import StudyRun, TrialSpec

# Each trial's values arrive as one JSON argument; it prints one report.
QUADRATIC = "import json, sys; p = json.loads(sys.argv[1]); print(json.dumps({'loss': (p['x'] - 1.0) ** 2}))"


class CommandArgs(Section):
    argv: list[str] = Field(..., min_length=1, description="The command; the trial's values are its last argument.")


def check(loaded: LoadedSpace, lines: SpaceLines) -> None:
    try:
        CommandArgs.model_validate(loaded.space.trial_args)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in ("trial_args", *error["loc"]))
        raise SpaceError(f"{where(loaded.path, lines, ('trial_args',))}: {field}: {error['msg']}") from None
    for key, metric in target_keys(loaded.space):
        if metric not in loaded.space.reports:
            raise SpaceError(f"{where(loaded.path, lines, key)}: metric {metric!r} is not among the command's reports")


def trainable(loaded: LoadedSpace, study: StudyRun) -> Callable[..., Any]:
    from ray import tune

    return tune.with_parameters(command_trial, argv=CommandArgs.model_validate(loaded.space.trial_args).argv,
                                study=study)


def command_trial(config: dict[str, Any], *, argv: list[str], study: StudyRun) -> None:
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    tracker = TrackedRun.start(study.tracking_uri, study.experiment, f"{study.study}-{trial_id}",
                               {STUDY_TAG: study.study, TRIAL_TAG: trial_id}, study.parent_run_id)
    out = subprocess.run([*argv, json.dumps(config)], capture_output=True, text=True, check=True, timeout=120)
    for step, line in enumerate(out.stdout.splitlines(), start=1):
        report = json.loads(line)
        tracker.log_metrics(report, step=step)
        tune.report({**report, RUN_ID_KEY: tracker.run_id})
    tracker.finish()


SPEC = TrialSpec(name="command", description="a command run with the trial's values", implementation=__name__,
                 cpus=0.25, has_base_config=False)
BY_PATH = TrialSpec(name=f"{__name__}:BY_PATH", description="the same, named by its import path",
                    implementation=__name__, cpus=0.25, has_base_config=False)


@pytest.fixture
def command_kind() -> Iterator[TrialSpec]:
    lmplatform.register_trial_kind(SPEC)
    yield SPEC
    trial_kinds.unregister(SPEC.name)


def _space(tmp_path: Path, trial: str = "command", argv: Any = (sys.executable, "-c", QUADRATIC), **extra: Any) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(json.dumps({
        "study": "command-study", "trial": trial, "trial_args": {"argv": list(argv)}, "reports": ["loss"],
        "parameters": {"x": {"distribution": "uniform", "low": -1, "high": 3}}, "metric": "loss", "mode": "min",
        "num_samples": 2, "max_concurrent": 2, "storage_path": str(tmp_path / "tune"), **extra}))
    return path


def test_an_unregistered_kind_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match=r"trial: .*unknown trial kind 'command'; available: evaluation, function, "
                                         r"pipeline, train") as refused:
        load_space(_space(tmp_path))
    assert "pipeline: a whole pipeline with the trial's values" in str(refused.value)  # each kind says what it runs


def test_the_space_is_checked_by_the_kind_and_reserves_its_cpus(command_kind: TrialSpec, tmp_path: Path) -> None:
    loaded = load_space(_space(tmp_path))
    assert loaded.space.kind is SPEC and loaded.space.trial_cpus() == 0.25 and loaded.base is None
    with pytest.raises(SpaceError, match="trial_args.argv: List should have at least 1 item"):
        load_space(_space(tmp_path, argv=[]))
    with pytest.raises(SpaceError, match="metric 'accuracy' is not among the command's reports"):
        load_space(_space(tmp_path, metric="accuracy"))
    with pytest.raises(SpaceError, match="command trials have no base config"):
        load_space(_space(tmp_path), ["optim.lr=0.1"])
    with pytest.raises(SpaceError, match="max_concurrent 'auto' sizes pipeline trials"):
        load_space(_space(tmp_path, max_concurrent="auto"))
    assert load_space(_space(tmp_path, trial=BY_PATH.name)).space.kind is BY_PATH  # no registration needed
    with pytest.raises(SpaceError, match="trial_args: the settings of a kind registered outside the package; function "
                                         "trials take none"):
        load_space(_space(tmp_path, trial="function", function="lmplatform.tune.trials:quadratic"))


def test_a_study_of_the_kind_runs_its_trials_and_finds_the_best(command_kind: TrialSpec, ray_session, mlflow_uri: str,
                                                               tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.tune.tuner import run_study

    result = run_study(_space(tmp_path), tracking_uri=mlflow_uri, verbose=0)
    losses = [trial["metrics"]["loss"] for trial in result.trials]
    assert len(losses) == 2 and all(trial["completed"] for trial in result.trials)
    assert result.best_metrics["loss"] == min(losses) == (result.best_params["x"] - 1.0) ** 2
    children = MlflowClient(mlflow_uri).search_runs(
        [MlflowClient(mlflow_uri).get_run(result.parent_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'")
    assert sorted(run.data.metrics["loss"] for run in children) == sorted(losses)
    assert result.champion is None  # the kind registers no model
