"""`TrialSpec`: what one kind of study trial is, in one place, as `StageSpec` is for pipeline stages.

A search space names its kind with `trial:` (train, function, pipeline, evaluation, or one registered). Everything
the study does with its trials is read from the kind's spec: the space checks the field naming what a trial runs
and reserves the kind's CPUs, `load_space` has the kind validate its base config and metrics, the tuner builds the
Ray Tune trainable and the MLflow experiment from it, and a kind that `registers` hands the best trial's model to
the champion gate. The registry is `tune/trial_kinds.py`: a new kind is its module plus one line there, or
`register_trial_kind(SPEC)` from a user's module.

The spec is light (no Ray, no torch); what runs is in its `implementation` module, imported on first use, with these
functions (`TrialImplementation`), the last three optional:

    check(loaded, lines) -> Any                     validate the base config, parameters and metrics (`SpaceError`
                                                    naming the YAML line); return the validated base config or None
    trainable(loaded, study: StudyRun) -> Callable  what Tune runs per trial, its fixed arguments bound
                                                    (`tune.with_parameters`); it reports with `tune.report`, its
                                                    last report carrying `RUN_ID_KEY`
    tracking(loaded) -> Any                         the base config's tracking section (its tracking_uri and
                                                    experiment): where the study logs
    before_study(loaded) -> None                    checks that read data files, once, before the study's run starts
    champion(loaded, best, tracking_uri, study) -> ChampionDecision   register the best trial's model and let the
                                                    gate decide on the alias (kinds with `registers`)
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

if TYPE_CHECKING:
    from lmplatform.tune.champion import ChampionDecision
    from lmplatform.tune.space import LoadedSpace, SpaceLines


@dataclass(frozen=True)
class StudyRun:
    """What every trial of a study shares: its MLflow parent run, name and tracking."""

    parent_run_id: str
    study: str
    tracking_uri: str
    experiment: str


class TrialImplementation(Protocol):
    def check(self, loaded: "LoadedSpace", lines: "SpaceLines") -> Any: ...
    def trainable(self, loaded: "LoadedSpace", study: StudyRun) -> Callable[..., Any]: ...


@dataclass(frozen=True)
class TrialSpec:
    """One kind of trial.

    - `name`: the space's `trial:` value.
    - `description`: one line saying what a trial runs, listed with the kinds when a space names an unknown one.
    - `implementation`: the module with the functions of `TrialImplementation`.
    - `runs`: the space field naming what a trial runs (`base_config`, `function`, ...), required for the kind;
      None when the kind reads only its `trial_args`. `runs_what` says what it names, for the error.
    - `cpus`: what one trial reserves unless `resources.cpu` says otherwise.
    - `has_base_config`: `--set` items that are not space fields go to the base config (a function has none).
    - `shares_variables`: the space's `vars` are the base config's too (a recipe's data root, set once).
    - `sizes_concurrency`: `max_concurrent: auto` sizes its trials by what they reserve (`concurrent_trials`).
    - `early_reports`: a trial reports other metrics before the study's own, so Tune's strict metric check is off
      (every metric name was checked by `check`).
    - `registers`: the best trial's model may be registered and gated (`champion`).
    """

    name: str
    description: str
    implementation: str
    runs: Optional[str] = None
    runs_what: str = ""
    cpus: float = 0.0
    has_base_config: bool = True
    shares_variables: bool = False
    sizes_concurrency: bool = False
    early_reports: bool = False
    registers: bool = False

    def module(self) -> TrialImplementation:
        return importlib.import_module(self.implementation)  # type: ignore[return-value]

    def hook(self, name: str) -> Optional[Callable[..., Any]]:
        """One of the implementation's optional functions (`tracking`, `before_study`, `champion`), or None."""
        return getattr(self.module(), name, None)

    def champion(self, loaded: "LoadedSpace", best: dict[str, Any], tracking_uri: str, study: str) -> "ChampionDecision":
        return self.module().champion(loaded, best, tracking_uri, study)  # type: ignore[attr-defined]
