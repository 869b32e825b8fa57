"""Pre-flight: every data file and model a pipeline names, checked before stage 1 starts.

Without it a missing file in stage 3 is found when stage 3 reads it, after stages 1
and 2 have trained for hours. The check reads no data and loads no model: files and
folders must exist and not be empty, model references must resolve (the packaged model,
a local Hugging Face folder, a model in the local Hugging Face cache, or a version in the
MLflow registry), and `stage:<name>` references must name a stage that will have run.
Every problem is collected, so one run of `lmp pipeline run` lists them all.

Paths are checked where the run reads them: relative to the working directory.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

from pydantic import BaseModel

from lmplatform.config.loader import ConfigError
from lmplatform.config.schema import DataConfig
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig
from lmplatform.models.resolve import ModelNotFoundError, model_version_source, resolve_model_path
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.pipeline.config import PipelineConfig, StageConfig
from lmplatform.pipeline.spec import STAGE_PREFIX, StageCheck
from lmplatform.retrieval.settings import DistractorConfig
from lmplatform.runtime import resolve_tracking_uri

REGISTRY_PREFIXES = ("models:/", "runs:/")
NOT_YET = "that stage has not run by the time this is needed"


@dataclass(frozen=True)
class Problem:
    where: str  # "stage 'general'", "task 'domain'" or a config file
    field: str  # "data.train_paths", "init_from", ...
    message: str
    path: Optional[str] = None  # the file or folder concerned, as written in the config

    def __str__(self) -> str:
        return f"{self.where}: {self.field}: {self.message}"


class PreflightError(ConfigError):
    """Raised before any stage runs; `problems` holds every problem found."""

    def __init__(self, pipeline: str, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        lines = [f"pipeline {pipeline!r} cannot start: {len(self.problems)} problem(s) found before stage 1; nothing was trained"]
        lines += [f"  {problem}" for problem in self.problems]
        super().__init__("\n".join(lines))


# -- files ---------------------------------------------------------------------

def _missing(raw: str, what: str) -> str:
    where = "" if Path(raw).expanduser().is_absolute() else f" (relative paths are read from {Path.cwd()})"
    return f"{what} not found: {raw}{where}"


def data_problems(paths: Sequence[str], field: str, where: str) -> list[Problem]:
    """Each path must be a non-empty file, or a folder holding at least one (as the readers expand them).
    A `stage:<name>` path is an earlier mine stage's output, checked when the pipeline config loads."""
    problems = []
    for raw in paths:
        if raw.startswith(STAGE_PREFIX):
            continue
        path = Path(raw).expanduser()
        if path.is_dir():
            if not any(p.is_file() and not p.name.startswith(".") for p in path.rglob("*")):
                problems.append(Problem(where, field, f"data folder is empty: {raw}", raw))
        elif path.is_file():
            if path.stat().st_size == 0:
                problems.append(Problem(where, field, f"data file is empty: {raw}", raw))
        else:
            problems.append(Problem(where, field, _missing(raw, "data file"), raw))
    return problems


def file_problem(raw: Optional[str], field: str, where: str) -> list[Problem]:
    """A single local file (a folds file, a saved Fisher); MLflow and remote URIs are left to their readers,
    except runs:/ URIs, whose run must exist."""
    if raw is None or "://" in raw:
        return []
    if raw.startswith(REGISTRY_PREFIXES):
        message = _registry_problem(raw)
        return [Problem(where, field, message, raw)] if message else []
    return [] if Path(raw).expanduser().is_file() else [Problem(where, field, _missing(raw, "file"), raw)]


# -- models --------------------------------------------------------------------

def _registry_problem(reference: str) -> Optional[str]:
    """Whether a models:/ version (or a runs:/ run) exists, without downloading it.

    Checked against the tracking URI `resolve_model_path` downloads from ($MLFLOW_TRACKING_URI or the
    project's sqlite store), the one a stage's run resolves its model references against.
    """
    from mlflow.tracking import MlflowClient

    uri = resolve_tracking_uri(None)
    try:
        client = MlflowClient(uri)
        if reference.startswith("models:/"):
            model_version_source(client, reference)
        else:
            client.get_run(reference[len("runs:/"):].split("/", 1)[0])
    except Exception as exc:  # MLflow raises its own types, and connection errors, for a missing entry
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{reference} cannot be found in MLflow at {uri}: {first_line}"
    return None


def model_problems(reference: Optional[str], field: str, where: str, will_run: Sequence[str] = (),
                   finished: Optional[Mapping[str, str]] = None, not_yet: str = NOT_YET) -> list[Problem]:
    """A model reference: stage:<name> (a stage in `will_run`, or a finished one whose folder is still
    there), models:/ or runs:/ (in the registry), 'default', a local folder or a Hugging Face cache id."""
    if reference is None:
        return []
    finished = finished or {}
    if reference.startswith(STAGE_PREFIX):
        name = reference[len(STAGE_PREFIX):]
        if name in finished:
            folder = Path(finished[name])
            if not (folder / "config.json").is_file():
                return [Problem(where, field, f"{reference} finished earlier, but its model folder {folder} is gone",
                                str(folder))]
            return []
        if name in will_run:
            return []
        return [Problem(where, field, f"{reference}: {not_yet}", reference)]
    if reference.startswith(REGISTRY_PREFIXES):
        message = _registry_problem(reference)
        return [Problem(where, field, message, reference)] if message else []
    try:
        resolve_model_path(reference)
    except ModelNotFoundError as exc:
        return [Problem(where, field, str(exc), reference)]
    return []


# -- configs -------------------------------------------------------------------

def config_sections(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, BaseModel]]:
    """Every nested config section with its dotted location (list items as name.i).

    No square brackets in locations: `lmp` prints errors through rich markup, which reads [x] as a tag."""
    yield prefix, model
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for index, item in items:
            if isinstance(item, BaseModel):
                location = f"{prefix}.{name}" if prefix else name
                yield from config_sections(item, location if index is None else f"{location}.{index}")


def _under(location: str, roots: Sequence[str]) -> bool:
    return any(location == root or location.startswith(root + ".") for root in roots)


def data_config_problems(config: BaseModel, where: str, skip: Sequence[str] = (), prefix: str = "") -> list[Problem]:
    """The files of every DataConfig and distractor list anywhere in `config` (a run config's data,
    ewc.fisher_from, retrieval_validation.pairs; a tune space's champion.confirm; an evaluation's data and
    retrieval distractors...), their fields named under `prefix`."""
    problems: list[Problem] = []
    for location, section in config_sections(config, prefix):
        if _under(location, skip):
            continue
        if isinstance(section, DataConfig):
            problems += data_problems(section.train_paths, f"{location}.train_paths", where)
            problems += data_problems(section.validation_paths, f"{location}.validation_paths", where)
        elif isinstance(section, DistractorConfig):
            problems += data_problems(section.paths, f"{location}.paths", where)
    return problems


def objective_model_fields(run: RunConfig) -> list[str]:
    """`objective.<field>` of each model reference the run's objective declares (`ObjectiveSpec.model_references`)."""
    return [f"objective.{name}" for name in objective_spec(run.objective.name).model_references]


def run_config_problems(run: RunConfig, where: str, skip: Sequence[str] = ()) -> list[Problem]:
    """Every data file and model reference of one run config, except the sections named in `skip`."""
    problems = data_config_problems(run, where, skip)
    rv = run.retrieval_validation
    files = [("objective", "objective.folds_file", getattr(run.objective, "folds_file", None)),
             ("ewc", "ewc.fisher_path", run.ewc.fisher_path if run.ewc else None)]
    models = [("model", "model.name_or_path", run.model.name_or_path),
              ("objective", "objective.miner_model", getattr(run.objective, "miner_model", None)),
              ("ewc", "ewc.anchor_model", run.ewc.anchor_model if run.ewc else None),
              ("retrieval_validation", "retrieval_validation.first_stage",
               rv.first_stage if rv is not None and rv.first_stage != "bm25" else None)]
    models += [(field, field, getattr(run.objective, field.split(".", 1)[1])) for field in objective_model_fields(run)]
    for section, field, value in files:
        if not _under(section, skip):
            problems += file_problem(value, field, where)
    for section, field, value in models:
        if not _under(section, skip):
            problems += model_problems(value, field, where)
    return problems


def evaluation_problems(evaluation: StageEvaluationConfig, prefix: str, where: str, will_run: Sequence[str],
                         finished: Mapping[str, str], not_yet: str = NOT_YET) -> list[Problem]:
    return (data_config_problems(evaluation, where, prefix=prefix)
            + model_problems(evaluation.mlm_head_from, f"{prefix}.mlm_head_from", where, will_run, finished, not_yet))


def stage_problems(cfg: PipelineConfig, stage: StageConfig, will_run: Sequence[str],
                   finished: Optional[Mapping[str, str]] = None) -> list[Problem]:
    """One stage's problems, as its kind checks them (`pipeline/spec.py`).

    `will_run`: the stages before this one (their models exist by the time this stage starts).
    """
    check = StageCheck(cfg, stage, stage.section, f"stage {stage.name!r}", will_run, finished or {})
    return stage.spec.module().problems(check)


def pipeline_problems(cfg: PipelineConfig, finished: Optional[Mapping[str, str]] = None) -> list[Problem]:
    """Every problem of the stages still to run; `finished` maps stages finished earlier (a resume) to their model folders."""
    finished = finished or {}
    problems: list[Problem] = []
    earlier: list[str] = []
    for stage in cfg.stages:
        if stage.name not in finished:
            problems += stage_problems(cfg, stage, earlier, finished)
        earlier.append(stage.name)
    # Task evaluations score the starting model before any stage runs: a stage's head is not there yet.
    for task in cfg.tasks:
        problems += evaluation_problems(task, "tasks", f"task {task.task!r}", (), finished,
                                         "tasks are first scored on the starting model, before any stage has run")
    return problems


def preflight_pipeline(cfg: PipelineConfig, finished: Optional[Mapping[str, str]] = None) -> None:
    """Raise `PreflightError` listing every problem, or return when the pipeline can start."""
    problems = pipeline_problems(cfg, finished)
    if problems:
        raise PreflightError(cfg.name, problems)
