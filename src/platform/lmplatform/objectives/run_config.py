"""`RunConfig`: one training run, the sections of `lmplatform.config.schema` and the objective's own section.

The objective's section is one of the registered objectives' configs, chosen by `name`: the union is
derived from the registry (`objectives/registry.py`) and rebuilt when an objective is registered, so
`config/` knows no objective. `lmp config schema` prints the JSON schema of `RunConfig`;
docs/config-reference.md is generated from it (`make docs`, `objectives/config_reference.py`).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional, Union

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import ConfigError, apply_overrides, parse_config, read_yaml
from lmplatform.config.schema import (
    CheckpointConfig,
    DataConfig,
    EWCConfig,
    ModelConfig,
    OptimConfig,
    ScalingConfig,
    TrackingConfig,
)
from lmplatform.models import export as export_formats
from lmplatform.models.export_spec import ExportError
from lmplatform.models.kind import CROSS_ENCODER
from lmplatform.objectives import registry
from lmplatform.objectives.mlm.config import MLMObjectiveConfig
from lmplatform.registry import is_import_path
from lmplatform.retrieval.settings import RetrievalValidationConfig


def objective_configs() -> tuple[type[Section], ...]:
    """The config class of every registered objective, in registry order (the union's)."""
    return tuple(spec.config for spec in registry.objective_specs())


# One of the registered objectives' configs, chosen by `name`; derived from the registry.
ObjectiveConfig = Annotated[Union[objective_configs()], Field(discriminator="name")]


def retrieval_validated_objectives() -> tuple[str, ...]:
    """The registered objectives a run may validate by corpus-level retrieval (`ObjectiveSpec.retrieval_validated`)."""
    return tuple(spec.name for spec in registry.objective_specs() if spec.retrieval_validated)


class RunConfig(Section):
    """One training run."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig
    objective: ObjectiveConfig = Field(default_factory=MLMObjectiveConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    scaling: ScalingConfig = Field(default_factory=ScalingConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    ewc: Optional[EWCConfig] = Field(None, description="Add an EWC penalty to the objective's loss.")
    retrieval_validation: Optional[RetrievalValidationConfig] = Field(
        None, description="Corpus-level retrieval metrics (val_ir_*) at every validation: "
        f"{', '.join(retrieval_validated_objectives())}.")

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> "RunConfig":
        """Validate; an objective named by its import path (`package.module:SPEC`) is imported and registered first,
        so that the objective union knows it (`registry.py`)."""
        objective = obj.get("objective") if isinstance(obj, dict) else None
        name = objective.get("name") if isinstance(objective, dict) else None
        if isinstance(name, str) and is_import_path(name) and name not in registry.objective_names():
            try:
                registry.objective_spec(name)
            except KeyError as exc:
                raise ConfigError(f"objective.name: {exc.args[0]}") from None
        return super().model_validate(obj, *args, **kwargs)

    @model_validator(mode="before")
    @classmethod
    def _objective_defaults_to_mlm(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("objective"), dict) and "name" not in data["objective"]:
            data = {**data, "objective": {"name": "mlm", **data["objective"]}}
        return data

    @model_validator(mode="after")
    def _retrieval_validation_fits(self) -> "RunConfig":
        rv, name = self.retrieval_validation, self.objective.name
        if rv is None:
            return self
        spec = registry.objective_spec(name)
        if not spec.retrieval_validated:
            raise ValueError(f"retrieval_validation applies to objectives {', '.join(retrieval_validated_objectives())}, "
                             f"not {name!r}; remove the section")
        if not spec.pair_data and rv.pairs is None:
            raise ValueError(f"retrieval_validation.pairs is required for {name} (its training data has no pairs): "
                             "name a pair file, e.g. {train_paths: [data/demo/pairs.jsonl], validation_fraction: 0.2}")
        # compared with the defaults, not `model_fields_set`: a config dumped and validated again (as workers
        # receive it) has every field set
        defaults = RetrievalValidationConfig.model_fields
        reranks = spec.model_kind == CROSS_ENCODER
        if not reranks and (rv.first_stage, rv.candidates) != (defaults["first_stage"].default,
                                                                defaults["candidates"].default):
            rerankers = [s.name for s in registry.objective_specs() if s.model_kind == CROSS_ENCODER]
            raise ValueError(f"retrieval_validation.first_stage and .candidates apply to {', '.join(rerankers)} only")
        if reranks and rv.hybrid is not None:
            raise ValueError(f"retrieval_validation.hybrid fuses BM25 with a bi-encoder; a {name} re-ranks "
                             "retrieval_validation.first_stage instead: remove hybrid")
        return self

    @model_validator(mode="after")
    def _early_stopping_has_validations(self) -> "RunConfig":
        if self.optim.early_stopping is not None and self.tracking.eval_every_n_steps is None:
            raise ValueError("optim.early_stopping reads the validations during training: set tracking.eval_every_n_steps")
        return self

    @model_validator(mode="after")
    def _data_has_the_objective_fields(self) -> "RunConfig":
        for field, reads in registry.objective_spec(self.objective.name).data_fields:
            if getattr(self.data, field) is None:
                raise ValueError(f"objective {self.objective.name} needs data.{field}: {reads}")
        return self

    @model_validator(mode="after")
    def _precision_fits_device(self) -> "RunConfig":
        if self.optim.precision == "fp16" and not self.scaling.use_gpu:
            raise ValueError("optim.precision 'fp16' needs a GPU (scaling.use_gpu: true); "
                             "on CPU use optim.precision 'bf16' or 'fp32'")
        return self

    @model_validator(mode="after")
    def _exports_fit(self) -> "RunConfig":
        kind = registry.objective_spec(self.objective.name).model_kind
        for name in self.tracking.exports:
            try:
                spec = export_formats.format_spec(name)
            except ExportError as exc:
                raise ValueError(f"tracking.exports: {exc}") from None
            if spec.needs_calibration:
                raise ValueError(f"tracking.exports: {name} needs calibration texts of the served domain; export it "
                                 f"with `lmp export --format {name} --calibration FILE`")
            refusal = spec.refusal(kind, export_formats.format_specs())
            if refusal:
                raise ValueError(f"tracking.exports: {refusal}")
        return self

    def registered_model_name(self) -> str:
        return self.tracking.registered_model or f"lmplatform-{self.objective.name}"

    def validates_at_start(self) -> bool:
        """Whether training validates before its first step: when `tracking.validate_at_start` asks, and always
        under early stopping, whose first best is the start."""
        return self.tracking.validate_at_start or self.optim.early_stopping is not None


def rebuild_objective_union() -> None:
    """Make `RunConfig.objective` accept exactly the registered objectives again (after `registry.register`)."""
    RunConfig.model_fields["objective"].annotation = Union[objective_configs()]  # the discriminator stays on the field
    RunConfig.model_rebuild(force=True)


registry.on_change(rebuild_objective_union)


def load_run_config(path: str | Path | None, overrides: Iterable[str] = (), base: dict[str, Any] | None = None) -> RunConfig:
    """Read `path` (or start from `base`), apply overrides and validate."""
    data = read_yaml(path) if path is not None else copy.deepcopy(base or {})
    data = apply_overrides(data, overrides)
    return parse_config(data, RunConfig, source=str(path) if path else "overrides")


# What the training loop reports besides validation metrics (a study may target these too).
LOOP_METRICS = ("loss", "step", "epoch", "tokens")


def validation_metrics(cfg: RunConfig) -> tuple[str, ...]:
    """Validation metric names (without `val_`) a run of this config reports."""
    names = registry.objective_spec(cfg.objective.name).validation_metrics
    if cfg.retrieval_validation is not None:
        names = (*names, *cfg.retrieval_validation.metric_names())
    return names


def reported_metrics(cfg: RunConfig) -> set[str]:
    """Every metric a run of this config reports (what a study may target)."""
    validation = validation_metrics(cfg)
    names = {f"val_{m}" for m in validation}
    if cfg.validates_at_start():
        names |= {f"val_{m}_initial" for m in validation}
    return names | set(LOOP_METRICS)
