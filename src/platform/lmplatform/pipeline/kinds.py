"""Every pipeline stage kind by name: adding one is its module (a section and a `StageSpec`) and one line in
`BUILTIN` below, or `register(SPEC)` in a user's module that a pipeline names in its `plugins`, so that every process
loading the pipeline imports it (pipeline/spec.py says what a spec holds).

The pipeline config's stage sections are derived from these specs (`pipeline/config.py`) and rebuilt when a kind
is registered; the runner, pre-flight, the stage cache and tune/ read the specs, never a kind's fields.
"""
from __future__ import annotations

from lmplatform.pipeline import mine_config, pairs_config, system_config
from lmplatform.pipeline.spec import StageSpec
from lmplatform.registry import Registry

TRAIN = StageSpec(
    name="train",
    section=None,
    description="A training stage: a run config (`config:` a file, or `run:` inline), with `set`, `ewc` and "
                "`evaluations`.",
    implementation="lmplatform.pipeline.train_stage",
    makes="model",
    uses_init=True,
    trains=True,
    registers=True,
    study_overrides=("tracking.register_model=false", "tracking.validate_at_start=false"),
)

# The order is the config reference's, after the training stage's own keys.
BUILTIN: tuple[StageSpec, ...] = (TRAIN, mine_config.SPEC, pairs_config.SPEC, system_config.SPEC)

_REGISTRY: Registry[StageSpec] = Registry("stage kind", BUILTIN)

stage_specs = _REGISTRY.specs
stage_kind_names = _REGISTRY.names
register = _REGISTRY.register
unregister = _REGISTRY.unregister
on_change = _REGISTRY.on_change


def section_kinds() -> tuple[StageSpec, ...]:
    """The kinds a stage selects by setting their section (every kind but the training one)."""
    return tuple(spec for spec in stage_specs() if spec.section is not None)
