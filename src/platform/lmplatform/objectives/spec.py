"""`ObjectiveSpec`: everything the platform knows about one objective, declared once in its folder.

Each `objectives/<name>/__init__.py` declares a `SPEC`; the registry, the config union of
`RunConfig.objective` and the metric names a Tune study may target are derived from the specs, and
callers above the objectives (the champion gate, retrieval validation, model cards, the benches) ask
a spec what they need to know instead of testing its name. This module is torch-free, like the
configs: validating a config never imports torch. The implementation (torch modules, collate, data
preparation, recipe) is imported on first use.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, get_args

from lmplatform.config.base import Section
from lmplatform.config.schema import DataConfig
from lmplatform.models.kind import ENCODER, ModelKind

if TYPE_CHECKING:
    from lmplatform.objectives.run_config import RunConfig
    from lmplatform.train.recipe import PreparedData, TrainingRecipe




@dataclass(frozen=True)
class ModelCardText:
    """What a model card says the trained model is for (`use`) and where it stops (`limits`)."""

    use: str
    limits: str


EMBEDDING_CARD = ModelCardText(
    "Text embeddings for semantic search, duplicate detection, clustering and nearest-neighbour classification of "
    "texts like its training data (`lmp serve`: /v1/search, /v1/embed, /v1/embeddings; `lmp export` for "
    "sentence-transformers, TEI or ONNX Runtime).",
    "Vectors are comparable only with vectors of this same version: re-index when the version changes.")


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
    - `model_kind`: what the trained model is (`ModelKind`); the champion gate loads and probes it by kind,
      retrieval validation re-ranks a first stage for a cross-encoder.
    - `retrieval_validated`: its recipe has a `retrieval_view`, so a run may set `retrieval_validation`
      (corpus-level val_ir_* metrics).
    - `pair_data`: it trains on (query, document) pairs read from `data` (`data.pairs.read_pairs`): retrieval
      validation takes its queries from them by default, and a confirmation set must share none of them.
    - `card`: the model card's "Intended use" and "Limits" of a model it trained.
    - `data_fields`: (field of `data`, what the objective reads from that column) for each optional `data` field
      it cannot train without; a config that leaves one unset fails validation with that reason.
    - The implementation module may also have `rows(cfg) -> {'train', 'validation'} rows`: the rows its
      `prepare_data` hands to Ray Data, read in this process without Ray (`rows` below).
    """

    name: str
    config: type[Section]
    validation_metrics: tuple[str, ...]
    evaluation_keys: tuple[str, ...]
    implementation: str
    model_references: tuple[str, ...] = ()
    model_kind: ModelKind = ENCODER
    retrieval_validated: bool = False
    pair_data: bool = False
    card: ModelCardText = EMBEDDING_CARD
    data_fields: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.model_kind not in get_args(ModelKind):
            raise ValueError(f"objective {self.name!r}: model_kind {self.model_kind!r} is not one of {get_args(ModelKind)}")
        unknown = [field for field, _ in self.data_fields if field not in DataConfig.model_fields]
        if unknown:
            raise ValueError(f"objective {self.name!r}: data_fields {unknown} are not fields of the data section")
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

    def rows(self, cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
        """{'train', 'validation'} rows as `prepare_data`'s Ray datasets yield them, read in this process (no Ray):
        for a machine without Ray (the GPU benches feed them to the worker's `Trainer` directly)."""
        module = self.module()
        if not hasattr(module, "rows"):
            raise ValueError(f"objective {self.name!r} has no Ray-free reader of its data ({self.implementation}.rows)")
        return module.rows(cfg)
