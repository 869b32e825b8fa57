"""`ObjectiveSpec`: everything the platform knows about one objective, declared once in its folder.

Each `objectives/<name>/__init__.py` declares a `SPEC`; the registry, the config union of
`RunConfig.objective` and the metric names a Tune study may target are derived from the specs.
This module is torch-free, like the configs: validating a config never imports torch. The
implementation (torch modules, collate, data preparation, recipe) is imported on first use.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from lmplatform.config.base import Section

if TYPE_CHECKING:
    from lmplatform.objectives.run_config import RunConfig
    from lmplatform.train.recipe import PreparedData, TrainingRecipe


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective.

    - `name`: the config's `objective.name` (its `config` class has `name: Literal[name]`).
    - `config`: the torch-free pydantic model of the `objective:` section.
    - `validation_metrics`: what its evaluator reports (without `val_`), the names a study may target.
    - `evaluation_keys`: flattened config keys (`objective.x`, `optim.batch_size`) besides the data's
      that change what a validation score means; two models' scores compare only where they match.
    - `implementation`: the module with `prepare_data(cfg) -> PreparedData` (driver: read and check the
      data) and `build_recipe(cfg) -> TrainingRecipe` (worker: model, objective, collate, evaluator).
    - `model_references`: fields of its config that name a model (a folder, models:/..., or stage:<name> in a
      pipeline, which the pipeline replaces with that stage's model folder); pre-flight checks them.
    """

    name: str
    config: type[Section]
    validation_metrics: tuple[str, ...]
    evaluation_keys: tuple[str, ...]
    implementation: str
    model_references: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        declared = self.config.model_fields["name"].default if "name" in self.config.model_fields else None
        if declared != self.name:
            raise ValueError(f"objective {self.name!r}: its config {self.config.__name__} must have "
                             f"name: Literal[{self.name!r}] = {self.name!r}, found default {declared!r}")

    def module(self) -> ModuleType:
        """The implementation module (imports torch)."""
        return importlib.import_module(self.implementation)

    def prepare_data(self, cfg: RunConfig) -> PreparedData:
        return self.module().prepare_data(cfg)

    def build_recipe(self, cfg: RunConfig) -> TrainingRecipe:
        return self.module().build_recipe(cfg)
