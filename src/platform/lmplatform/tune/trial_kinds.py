"""Every kind of study trial by name: adding one is its module (the functions of `TrialImplementation`) and one line
in `BUILTIN` below, or `register(SPEC)` (`lmplatform.register_trial_kind`) in a user's module; a spec named by its
import path (`mypackage.trials:SPEC`) needs no call. tune/trial_spec.py says what a spec holds.
"""
from __future__ import annotations

from lmplatform.registry import Registry
from lmplatform.tune.trial_spec import TrialSpec

TRAIN = TrialSpec(
    name="train", description="a distributed training run of a run config with the trial's values",
    implementation="lmplatform.tune.kinds.train", runs="base_config", runs_what="a run config YAML", registers=True)
FUNCTION = TrialSpec(
    name="function", description="a Python function called with the trial's values; each dict it returns or yields "
    "is one report", implementation="lmplatform.tune.kinds.function", runs="function", runs_what="module:callable",
    cpus=0.01, has_base_config=False)
PIPELINE = TrialSpec(
    name="pipeline", description="a whole pipeline with the trial's values, stages identical across trials run once",
    implementation="lmplatform.tune.kinds.pipeline", runs="base_pipeline", runs_what="a pipeline YAML",
    shares_variables=True, sizes_concurrency=True, early_reports=True, registers=True)
EVALUATION = TrialSpec(
    name="evaluation", description="a registered evaluation with the trial's values, as `lmp evaluate` runs it",
    implementation="lmplatform.tune.kinds.evaluation", runs="base_evaluation",
    runs_what="an evaluation config YAML", cpus=1.0)

BUILTIN: tuple[TrialSpec, ...] = (TRAIN, FUNCTION, PIPELINE, EVALUATION)

_REGISTRY: Registry[TrialSpec] = Registry("trial kind", BUILTIN)

trial_spec = _REGISTRY.get
trial_kind_names = _REGISTRY.names
register = _REGISTRY.register
unregister = _REGISTRY.unregister
