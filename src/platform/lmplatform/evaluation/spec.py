"""`EvaluationSpec`: everything the platform knows about one evaluation, declared once in its folder.

Each `evaluation/tasks/<name>/__init__.py` declares a `SPEC`; the registry (`evaluation/registry.py`), the task union
of an evaluation config (`lmp evaluate`, `evaluation/config.py`) and the evaluations a pipeline stage may run
(`evaluation/stage_evaluation.py`) are derived from the specs. Torch-free, like the configs: the implementation is
imported on first use.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Optional, get_args

from lmplatform.config.base import Section

if TYPE_CHECKING:
    from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig, StageEvaluationResult
    from lmplatform.evaluation.tasks.common import ModelCache, TaskResult


@dataclass(frozen=True)
class EvaluationSpec:
    """One evaluation.

    - `name`: its `task:` in an evaluation config and its `name:` in a pipeline stage's `evaluations:`.
    - `implementation`: the module with `run(task, output_dir, models) -> TaskResult` when it has a `config`, and
      `evaluate_model(model_dir, cfg, head_from) -> StageEvaluationResult` when it `scores_one_model`.
    - `config`: the torch-free pydantic model of its task in an evaluation config (`task: Literal[name]`): every
      dataset x model it names, a report section and PNGs. None: it is not an `lmp evaluate` task.
    - `scores_one_model`: it scores one model folder on a `StageEvaluationConfig` (a pipeline's evaluations before
      and after a stage, the task-score matrix R of A/BWT/FWT).
    - `stage_settings`: the fields of `StageEvaluationConfig` only it reads (None by default); another evaluation
      that sets one is refused.
    """

    name: str
    implementation: str
    config: Optional[type[Section]] = None
    scores_one_model: bool = False
    stage_settings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.config is None and not self.scores_one_model:
            raise ValueError(f"evaluation {self.name!r}: declare a config (an lmp evaluate task), scores_one_model, "
                             "or both")
        if self.config is not None:
            field = self.config.model_fields.get("task")
            if field is None or get_args(field.annotation) != (self.name,):
                raise ValueError(f"evaluation {self.name!r}: its config {self.config.__name__} must have "
                                 f"task: Literal[{self.name!r}]")

    def module(self) -> ModuleType:
        """The implementation module (may import torch)."""
        return importlib.import_module(self.implementation)

    def run(self, task: Section, output_dir: Path, models: ModelCache) -> TaskResult:
        """Its part of an `lmp evaluate` report."""
        return self.module().run(task, output_dir, models)

    def evaluate_model(self, model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
        """One model's metrics and score, for a pipeline stage."""
        if not self.scores_one_model:
            raise ValueError(f"evaluation {self.name!r} does not score one model")
        return self.module().evaluate_model(model_dir, cfg, head_from)
