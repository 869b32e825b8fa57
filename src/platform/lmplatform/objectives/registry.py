"""Every objective by name: adding one is its folder and one line in `BUILTIN` below.

What else knows the objectives is derived from these specs: the config union of
`RunConfig.objective` (objectives/run_config.py), the metric names a study may target and the
settings that define them (tune/metrics.py). Torch-free: each spec imports its
implementation on first use.
"""
from __future__ import annotations

from lmplatform.objectives import biencoder, biencoder_distill, classifier, cross_encoder, declutr, graph_cl, mlm, sts
from lmplatform.objectives.spec import ObjectiveSpec
from lmplatform.registry import Registry

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

_REGISTRY: Registry[ObjectiveSpec] = Registry("objective", BUILTIN)

objective_specs = _REGISTRY.specs
objective_names = _REGISTRY.names
objective_spec = _REGISTRY.get
register = _REGISTRY.register
unregister = _REGISTRY.unregister
on_change = _REGISTRY.on_change
