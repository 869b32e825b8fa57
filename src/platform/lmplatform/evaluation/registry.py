"""Every evaluation by name: adding one is its folder under `evaluation/tasks/` and one line in `BUILTIN` below.

What else knows the evaluations is derived from these specs: the task union of an evaluation config
(`evaluation/config.py`, `lmp evaluate`) and the evaluations a pipeline stage may name
(`evaluation/stage_evaluation.py`). Torch-free: each spec imports its implementation on first use.
"""
from __future__ import annotations

from lmplatform.evaluation.spec import EvaluationSpec
from lmplatform.evaluation.tasks import classification, old_domain_mlm, retrieval, sts
from lmplatform.registry import Registry

# The order is the task union's: the order of the tasks in a config error's "expected tags".
BUILTIN: tuple[EvaluationSpec, ...] = (
    retrieval.SPEC,
    sts.SPEC,
    classification.SPEC,
    old_domain_mlm.SPEC,
)

_REGISTRY: Registry[EvaluationSpec] = Registry("evaluation", BUILTIN)

evaluation_specs = _REGISTRY.specs
evaluation_names = _REGISTRY.names
evaluation_spec = _REGISTRY.get
register = _REGISTRY.register
unregister = _REGISTRY.unregister
on_change = _REGISTRY.on_change
