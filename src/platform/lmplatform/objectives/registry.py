"""Every objective by name: adding one is its folder and one line in `BUILTIN` below.

What else knows the objectives is derived from these specs: the config union of
`RunConfig.objective` (objectives/run_config.py), the metric names a study may target and the
settings that define them (tune/metrics.py). Torch-free: each spec imports its
implementation on first use.
"""
from __future__ import annotations

from typing import Callable

from lmplatform.objectives import biencoder, biencoder_distill, classifier, cross_encoder, declutr, graph_cl, mlm, sts
from lmplatform.objectives.spec import ObjectiveSpec

# The order is the config union's: it is the order of the objectives in docs/config-reference.md
# and in the "expected tags" of a config error.
BUILTIN: tuple[ObjectiveSpec, ...] = (
    mlm.SPEC,
    biencoder.SPEC,
    biencoder_distill.SPEC,
    classifier.SPEC,
    cross_encoder.SPEC,
    declutr.SPEC,
    graph_cl.SPEC,
    sts.SPEC,
)

_OBJECTIVES: dict[str, ObjectiveSpec] = {spec.name: spec for spec in BUILTIN}
_ON_CHANGE: list[Callable[[], None]] = []


def objective_specs() -> tuple[ObjectiveSpec, ...]:
    return tuple(_OBJECTIVES.values())


def objective_names() -> tuple[str, ...]:
    return tuple(_OBJECTIVES)


def objective_spec(name: str) -> ObjectiveSpec:
    if name not in _OBJECTIVES:
        raise KeyError(f"unknown objective {name!r}; available: {', '.join(sorted(_OBJECTIVES))}")
    return _OBJECTIVES[name]


def register(spec: ObjectiveSpec) -> None:
    """Add an objective defined outside this package; `RunConfig` then accepts its config.

    Call it in a module that every process imports before it validates a config (Ray
    workers validate the run config they receive).
    """
    if spec.name in _OBJECTIVES:
        raise ValueError(f"objective {spec.name!r} is registered already")
    _OBJECTIVES[spec.name] = spec
    _changed()


def unregister(name: str) -> None:
    """Remove an objective added by `register` (tests)."""
    if any(spec.name == name for spec in BUILTIN):
        raise ValueError(f"objective {name!r} is built in")
    del _OBJECTIVES[name]
    _changed()


def on_change(callback: Callable[[], None]) -> None:
    """Call `callback` after every `register` and `unregister` (run_config.py rebuilds `RunConfig`'s union)."""
    _ON_CHANGE.append(callback)


def _changed() -> None:
    for callback in _ON_CHANGE:
        callback()
