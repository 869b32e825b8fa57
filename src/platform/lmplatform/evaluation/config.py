"""`EvaluationConfig`: what to evaluate, on which data, with which models (its own YAML, `configs/eval/`).

An evaluation config holds one or more tasks, each chosen by its `task` discriminator among the registered
evaluations that are `lmp evaluate` tasks (`evaluation/registry.py`). The union is derived from the registry and
rebuilt when an evaluation is registered, so a new task is its folder and one registry line.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional, Union

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import apply_overrides, parse_config, read_yaml
from lmplatform.evaluation import registry


def task_configs() -> tuple[type[Section], ...]:
    """The task config of every registered evaluation that has one, in registry order (the union's)."""
    return tuple(spec.config for spec in registry.evaluation_specs() if spec.config is not None)


def task_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in registry.evaluation_specs() if spec.config is not None)


def task_union() -> Any:
    """One of the registered tasks' configs, chosen by `task`."""
    return Annotated[Union[task_configs()], Field(discriminator="task")]


TaskConfig = task_union()


class EvaluationTrackingConfig(Section):
    tracking_uri: Optional[str] = Field(None, description="Default: $MLFLOW_TRACKING_URI, else sqlite under <project>/mlruns.")
    experiment: str = Field("lmplatform-eval", min_length=1)
    run_id: Optional[str] = Field(
        None, description="Log into this existing MLflow run (the run of the model evaluated). Default: the run of "
        "the first models:/ model evaluated, else a new run."
    )
    run_name: Optional[str] = None
    enabled: bool = True


class EvaluationConfig(Section):
    name: str = Field("evaluation", min_length=1)
    output_dir: str = Field("runs/eval", description="Report folder: report.json, report.md, PNGs.")
    tasks: list[TaskConfig] = Field(..., min_length=1, description="The tasks, each chosen by `task`: "
                                    f"{', '.join(task_names())}.")
    tracking: EvaluationTrackingConfig = Field(default_factory=EvaluationTrackingConfig)

    @model_validator(mode="after")
    def _one_task_per_kind(self) -> "EvaluationConfig":
        # Reports and metric names are keyed by task kind: a second task of a kind would overwrite the first.
        kinds = [t.task for t in self.tasks]
        repeated = sorted({k for k in kinds if kinds.count(k) > 1})
        if repeated:
            raise ValueError(f"tasks: more than one {repeated[0]!r} task; list all its datasets (and encoders or "
                             f"retrievers) in one task instead")
        return self


def rebuild_task_union() -> None:
    """Make `EvaluationConfig.tasks` accept exactly the registered tasks again (after `registry.register`)."""
    EvaluationConfig.model_fields["tasks"].annotation = list[task_union()]
    EvaluationConfig.model_rebuild(force=True)


registry.on_change(rebuild_task_union)


def load_evaluation_config(path: str | Path | None, overrides: Iterable[str] = (),
                           base: Optional[dict[str, Any]] = None) -> EvaluationConfig:
    """Read the YAML (or `base`), apply `--set a.b=c` overrides, validate; raises ConfigError naming the field."""
    data = read_yaml(path) if path is not None else copy.deepcopy(base or {})
    data = apply_overrides(data, overrides)
    return parse_config(data, EvaluationConfig, source=str(path) if path else "overrides")
