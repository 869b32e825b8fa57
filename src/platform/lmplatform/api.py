"""The Python API: what the `lmp` commands do, as functions (docs/python-api.md).

Each takes a config file (or a validated config model) plus `--set`-style overrides, validates everything before
Ray or a worker starts, and returns the command's result object. They start an embedded Ray, or join the cluster
at $RAY_ADDRESS (a `ray job submit` job), as the commands do. `import lmplatform` loads none of this: the names
are read from here on first use (`lmplatform.__getattr__`).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from lmplatform.evaluation import registry as evaluations
from lmplatform.evaluation import runner as evaluation_runner
from lmplatform.evaluation.config import EvaluationConfig, load_evaluation_config
from lmplatform.evaluation.runner import EvaluationResult
from lmplatform.models import export as export_formats
from lmplatform.objectives import registry as objectives
from lmplatform.objectives.run_config import RunConfig, load_run_config
from lmplatform.pipeline import kinds as stage_kinds
from lmplatform.pipeline.config import PipelineConfig, load_pipeline_config
from lmplatform.ray_runtime import ensure_ray
from lmplatform.tune import trial_kinds
from lmplatform.tune.space import load_space

if TYPE_CHECKING:
    from lmplatform.jobs.train_run import TrainingResult
    from lmplatform.models.export_spec import ExportResult
    from lmplatform.pipeline.runner import PipelineResult
    from lmplatform.tune.results import StudyResult


def run_training(config: str | Path | RunConfig, overrides: Iterable[str] = (), resume: Optional[str] = None,
                 address: Optional[str] = None) -> TrainingResult:
    """`lmp train`: one Ray Train run of a run config (YAML path or `RunConfig`); `resume` continues a run by name."""
    from lmplatform.jobs.train_run import run_training as run

    cfg = config if isinstance(config, RunConfig) else load_run_config(config, list(overrides))
    ensure_ray(address)
    return run(cfg, resume=resume)


def run_pipeline(config: str | Path | PipelineConfig, overrides: Iterable[str] = (), resume: Optional[str] = None,
                 address: Optional[str] = None) -> PipelineResult:
    """`lmp pipeline run`: every stage of a pipeline config in order, each reused or resumed where it can be."""
    from lmplatform.pipeline.runner import run_pipeline as run

    cfg = config if isinstance(config, PipelineConfig) else load_pipeline_config(config, list(overrides))
    ensure_ray(address)
    return run(cfg, resume)


def run_study(space: str | Path, overrides: Iterable[str] = (), resume: Optional[str] = None,
              address: Optional[str] = None) -> StudyResult:
    """`lmp tune`: a Ray Tune study of a search space file, its champion gate and registration."""
    from lmplatform.tune.tuner import run_study as run

    load_space(space, list(overrides))  # every check before Ray starts
    ensure_ray(address)
    return run(space, list(overrides), resume=resume)


def run_evaluation(config: str | Path | EvaluationConfig, overrides: Iterable[str] = ()) -> EvaluationResult:
    """`lmp evaluate run`: the tasks of an evaluation config on its models."""

    cfg = config if isinstance(config, EvaluationConfig) else load_evaluation_config(config, list(overrides))
    return evaluation_runner.run_evaluation(cfg)


def serve(model: Optional[str] = None, config: Optional[str | Path] = None, overrides: Iterable[str] = (),
          host: Optional[str] = None, port: Optional[int] = None, name: Optional[str] = None,
          address: Optional[str] = None) -> str:
    """`lmp serve run --detach`: deploy a registered model (`models:/name@alias`, `models:/name/3`) or the config's,
    on the Ray joined or started here, and return its URL. It serves until `stop_serving(name)` or Ray's end."""
    from lmplatform.serving.launch import launch, plan_launch

    plan = plan_launch(config, name, list(overrides), {"model": model}, host, port)
    ensure_ray(address, serving=True)
    launch(plan)
    return plan.url


def stop_serving(name: Optional[str] = None) -> None:
    """Delete the application `serve` deployed (by its name; default: the config's, `lmp`)."""
    from ray import serve as ray_serve

    from lmplatform.serving.control import DEFAULT_APP

    ray_serve.delete(name or DEFAULT_APP)


def export(model: str | Path, out: str | Path, fmt: str = "sentence-transformers",
           calibration: Optional[Sequence[str]] = None) -> ExportResult:
    """`lmp export`: a model folder, 'default' or a models:/ URI written as `fmt` (sentence-transformers, onnx,
    onnx-int8, openvino, openvino-int8, or a registered format: openvino-int8 needs calibration texts of the served
    domain)."""

    return export_formats.export_model(model, fmt, out, calibration=calibration)


def register_objective(spec: object) -> None:
    """Add an objective defined outside the package (an `ObjectiveSpec`; docs/architecture.md)."""

    objectives.register(spec)  # type: ignore[arg-type]


def register_evaluation(spec: object) -> None:
    """Add an evaluation task defined outside the package (an `EvaluationSpec`)."""

    evaluations.register(spec)  # type: ignore[arg-type]


def register_stage_kind(spec: object) -> None:
    """Add a pipeline stage kind defined outside the package (a `StageSpec`, pipeline/spec.py): a stage selects it by
    setting its section, `<spec.name>: {...}`."""

    stage_kinds.register(spec)  # type: ignore[arg-type]


def register_trial_kind(spec: object) -> None:
    """Add a kind of study trial defined outside the package (a `TrialSpec`, tune/trial_spec.py): a search space
    selects it with `trial: <spec.name>` and gives its settings in `trial_args`."""

    trial_kinds.register(spec)  # type: ignore[arg-type]


def register_export_format(spec: object) -> None:
    """Add an export format defined outside the package (an `ExportFormatSpec`, models/export_spec.py): `lmp export
    --format`, `export` and a run's `tracking.exports` then take its name."""

    export_formats.register(spec)  # type: ignore[arg-type]
