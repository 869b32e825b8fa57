"""The pipeline config: an ordered list of stages, each a run config plus how it chains.

A bad pipeline (unknown key, a stage that names a later stage, a stage whose run
config is invalid) fails at load time, before any stage runs.
"""
from __future__ import annotations

import copy
import importlib
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from pydantic import ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from lmplatform.config.base import Section
from lmplatform.config.loader import ConfigError, apply_overrides, parse_config, read_yaml
from lmplatform.config.schema import DataConfig
from lmplatform.config.variables import extend, substitute
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig
from lmplatform.objectives.registry import objective_names, objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.pipeline.kinds import TRAIN, on_change, section_kinds, stage_specs
from lmplatform.pipeline.spec import NAME_PATTERN, STAGE_PREFIX, StageSpec

# How a stage that makes no model is named where a model is expected.
_WHAT_IT_MAKES = {"pairs_file": "makes a pairs file, not a model (use it in data.train_paths)",
                  "files": "makes pairs files, not a model (name one as stage:<name>/<file> in data paths)",
                  "nothing": "makes no model"}


class PipelineTrackingConfig(Section):
    tracking_uri: Optional[str] = Field(None, description="MLflow tracking URI for the parent run and every stage.")
    experiment: str = Field("lmplatform-pipelines", min_length=1)


class StageEWCConfig(Section):
    """EWC against an earlier stage's model, or against a model trained outside this pipeline."""

    model_config = ConfigDict(populate_by_name=True)  # ewc.lambda is stored as lambda_; merged with Section's config

    anchor: Optional[str] = Field(None, description="The earlier stage whose model is θ* (and where the Fisher is computed).")
    anchor_model: Optional[str] = Field(
        None, description="Or θ* from outside this pipeline: a folder, models:/<name>@<alias> or 'default' "
        "(e.g. a domain stage shared by several pipelines, run once).",
    )
    data: Optional[DataConfig] = Field(None, description="Data for the Fisher diagonal (the anchor stage's data).")
    fisher_path: Optional[str] = Field(None, description="Or a saved Fisher diagonal (path or MLflow URI).")
    lambda_: float = Field(..., gt=0.0, alias="lambda")
    samples: int = Field(7000, ge=1)
    batch_size: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> "StageEWCConfig":
        if (self.data is None) == (self.fisher_path is None):
            raise ValueError("set exactly one of ewc.data (compute the Fisher) or ewc.fisher_path (reuse one)")
        if (self.anchor is None) == (self.anchor_model is None):
            raise ValueError("set exactly one of ewc.anchor (an earlier stage) "
                             "or ewc.anchor_model (a model outside the pipeline)")
        return self

    @property
    def anchor_reference(self) -> str:
        """What θ* is, as an init_from-style reference: stage:<name>, a folder or models:/..."""
        return STAGE_PREFIX + self.anchor if self.anchor else str(self.anchor_model)


class StageConfig(Section):
    """One stage: a training run (`config` or `run`), or the section of one other kind (`mine`, `pairs`, `system`,
    or a registered kind: pipeline/kinds.py), whose fields are added from the registry (`_add_kind_sections`)."""

    name: str = Field(..., pattern=NAME_PATTERN)
    config: Optional[str] = Field(None, description="A run config YAML (relative to the pipeline file).")
    run: Optional[dict[str, Any]] = Field(None, description="An inline run config (instead of `config`).")
    set: list[str] = Field(default_factory=list, description="--set style overrides applied to the run config.")
    init_from: str = Field(
        "default", description="stage:<name> (that stage's model), models:/<name>@<alias>, a folder, or 'default'; "
        "for a mine stage, the bi-encoder that mines.")
    ewc: Optional[StageEWCConfig] = None
    evaluations: list[StageEvaluationConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_run_source(self) -> "StageConfig":
        kinds = [spec.name for spec in section_kinds()]
        if sum(getattr(self, source, None) is not None for source in ("config", "run", *kinds)) != 1:
            sources = ["`config` (a file)", "`run` (inline)", *(f"`{kind}`" for kind in kinds)]
            raise ValueError(f"stage {self.name!r}: set exactly one of {', '.join(sources[:-1])} or {sources[-1]}")
        if self.spec.section is not None and (self.set or self.ewc or self.evaluations):
            raise ValueError(f"stage {self.name!r}: a {self.kind} stage trains nothing: remove set, ewc and evaluations")
        return self

    @property
    def spec(self) -> StageSpec:
        """The stage's kind (pipeline/kinds.py): the one whose section it sets, else the training kind."""
        return next((spec for spec in section_kinds() if getattr(self, spec.name, None) is not None), TRAIN)

    @property
    def kind(self) -> str:
        return self.spec.name

    @property
    def section(self) -> Any:
        """The kind's section as written (None for a training stage, whose config is its run config)."""
        return getattr(self, self.kind) if self.spec.section is not None else None


class StageReuseConfig(Section):
    """Reuse of stages across pipeline runs: a stage whose resolved config and inputs (by content) match a stage
    already run takes that stage's outputs instead of running again (lmplatform/pipeline/cache.py)."""

    enabled: bool = Field(False, description="Look stages up before running them, and record them after (a study's "
                          "pipeline trials turn it on).")
    path: Optional[str] = Field(None, description="The cache folder, shared by every pipeline that names it. "
                                "Default: <storage_path>/stage-cache.")


class PipelineConfig(Section):
    """A multi-stage training pipeline."""

    name: str = Field(..., pattern=NAME_PATTERN)
    description: str = ""
    plugins: list[str] = Field(default_factory=list, description="Modules imported before the stages are validated, "
                               "in every process that loads the pipeline (a study's trials too): one that registers a "
                               "stage kind (`kinds.register`) makes its section a stage's.")
    tracking: PipelineTrackingConfig = Field(default_factory=PipelineTrackingConfig)
    storage_path: str = Field("runs/pipelines", description="Pipeline state and every stage's Ray Train runs go here.")
    reuse: StageReuseConfig = Field(default_factory=StageReuseConfig)
    stages: list[StageConfig] = Field(..., min_length=1)
    tasks: list[StageEvaluationConfig] = Field(
        default_factory=list,
        description="Evaluations with a `task` run on the start model and after every stage: they fill R for A/BWT/FWT/REM.",
    )
    base_dir: str = Field(
        ".", description="Set by the loader: the pipeline file's folder; stage config paths are relative to it.")

    @model_validator(mode="after")
    def _references(self) -> "PipelineConfig":
        seen: list[str] = []
        no_model = {stage.name: stage.spec for stage in self.stages if stage.spec.makes != "model"}
        for stage in self.stages:
            if stage.name in seen:
                raise ValueError(f"stage name {stage.name!r} is used twice")
            refs = [("init_from", stage.init_from), ("ewc.anchor", stage.ewc.anchor_reference if stage.ewc else None)]
            refs += [("evaluations.mlm_head_from", e.mlm_head_from) for e in stage.evaluations]
            for what, ref in refs:
                if ref and ref.startswith(STAGE_PREFIX) and ref[len(STAGE_PREFIX):] not in seen:
                    raise ValueError(f"stage {stage.name!r}: {what} names {ref[len(STAGE_PREFIX):]!r}, which is not an "
                                     f"earlier stage (earlier: {', '.join(seen) or 'none'})")
                if ref and ref.startswith(STAGE_PREFIX) and ref[len(STAGE_PREFIX):] in no_model:
                    name = ref[len(STAGE_PREFIX):]
                    raise ValueError(f"stage {stage.name!r}: {what} names {no_model[name].name} stage {name!r}, which "
                                     f"{_WHAT_IT_MAKES[no_model[name].makes]}")
            seen.append(stage.name)
        for task in self.tasks:
            if not task.task:
                raise ValueError(f"tasks: evaluation {task.key!r} needs a `task` name")
        return self

    def stage(self, name: str) -> StageConfig:
        return next(s for s in self.stages if s.name == name)


def _add_kind_sections() -> None:
    """One optional field of StageConfig per kind with a section, from the registry; rebuilt when one is registered."""
    for name in _KIND_FIELDS:
        del StageConfig.model_fields[name]
    _KIND_FIELDS.clear()
    for spec in section_kinds():
        StageConfig.model_fields[spec.name] = FieldInfo(annotation=Optional[spec.section], default=None,  # type: ignore[arg-type]
                                                        description=spec.description)
        _KIND_FIELDS.add(spec.name)
    StageConfig.model_rebuild(force=True)
    PipelineConfig.model_rebuild(force=True)


_KIND_FIELDS: set[str] = set()
_add_kind_sections()
on_change(_add_kind_sections)


def stage_run_data(pipeline: PipelineConfig, stage: StageConfig) -> dict[str, Any]:
    """The stage's run config as a dict, before the pipeline fills in model, tracking and storage."""
    if stage.config is not None:
        path = Path(stage.config)
        if not path.is_absolute():
            path = Path(pipeline.base_dir) / path
        data = read_yaml(path)
    else:
        data = dict(stage.run or {})
    return apply_overrides(data, stage.set)


DATA_PATH_FIELDS = ("train_paths", "validation_paths")


def stage_references(value: Any) -> list[str]:
    """Every `stage:<name>` and `stage:<name>/<output>` string in a (nested) config value, without the prefix."""
    if isinstance(value, str):
        return [value[len(STAGE_PREFIX):]] if value.startswith(STAGE_PREFIX) else []
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in stage_references(item)]
    if isinstance(value, (list, tuple)):
        return [ref for item in value for ref in stage_references(item)]
    return []


def resolve_references(value: Any, outputs: Mapping[str, str]) -> Any:
    """`value` with each `stage:<ref>` string whose ref is in `outputs` replaced by `outputs[ref]`: a finished
    stage's file (a mine stage's pairs, `<pairs stage>/<split>`) or model folder (a training stage)."""
    if isinstance(value, str):
        return outputs.get(value[len(STAGE_PREFIX):], value) if value.startswith(STAGE_PREFIX) else value
    if isinstance(value, dict):
        return {key: resolve_references(item, outputs) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [resolve_references(item, outputs) for item in value]
    return value


def stage_data_references(data: dict[str, Any]) -> list[str]:
    """The stage names a run config's `data` paths refer to as `stage:<name>` (a mine stage's pairs file)."""
    section = data.get("data") or {}
    paths = [p for name in DATA_PATH_FIELDS for p in _as_list(section.get(name))]
    return [ref for ref in stage_references(paths) if "/" not in ref]


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def objective_model_references(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, stage name) of each `stage:<name>` in the objective's model fields (`ObjectiveSpec.model_references`,
    e.g. biencoder_distill's `teacher`) of a run config dict."""
    section = data.get("objective")
    if not isinstance(section, dict) or section.get("name") not in objective_names():
        return []
    values = [(f"objective.{name}", section.get(name)) for name in objective_spec(section["name"]).model_references]
    return [(field, value[len(STAGE_PREFIX):]) for field, value in values
            if isinstance(value, str) and value.startswith(STAGE_PREFIX)]


def build_stage_config(
    pipeline: PipelineConfig, stage: StageConfig, model: str, storage: str, run_name: str,
    ewc_anchor_model: Optional[str] = None, stage_outputs: Optional[Mapping[str, str]] = None,
) -> RunConfig:
    """The RunConfig the stage trains with: its own config, then what the pipeline decides.

    `stage_outputs` maps finished stages to what they made (`resolve_references`): a mine stage's pairs
    file for `stage:<name>` data paths, a pairs stage's files for `stage:<name>/<split>`, a training stage's
    model folder for `stage:<name>` in the objective's model fields (a distillation teacher). Without it the
    references stay as written (validation before anything ran)."""
    data = resolve_references(stage_run_data(pipeline, stage), stage_outputs or {})
    overrides = [
        f"model.name_or_path={model}",
        f"checkpoint.storage_path={storage}",
        f"tracking.experiment={pipeline.tracking.experiment}",
        f"tracking.run_name={run_name}",
    ]
    if pipeline.tracking.tracking_uri:
        overrides.append(f"tracking.tracking_uri={pipeline.tracking.tracking_uri}")
    data = apply_overrides(data, overrides)
    data.setdefault("tracking", {}).setdefault("registered_model", f"{pipeline.name}-{stage.name}")
    if stage.ewc is not None:
        ewc = stage.ewc
        data["ewc"] = {
            "lambda": ewc.lambda_, "samples": ewc.samples, "batch_size": ewc.batch_size,
            "anchor_model": ewc_anchor_model,
            **({"fisher_from": ewc.data.model_dump(mode="json")} if ewc.data else {"fisher_path": ewc.fisher_path}),
        }
    return parse_config(data, RunConfig, source=f"stage {stage.name}")


def load_pipeline_config(path: str | Path, overrides: Iterable[str] = ()) -> PipelineConfig:
    """Read and validate a pipeline YAML; also validates every stage's run config.

    Overrides: `name=x`, `tracking.experiment=x`, ... apply to the pipeline; `stages.<stage>.<field>...=v` to that
    stage, by the stage's own fields (`stages.biencoder.run.optim.lr=3e-5`, `stages.negatives.mine.range_max=30`,
    `stages.task.ewc.lambda=10`); any other `stages.<stage>.<section>.<field>=v` is added to the stage's `set`
    list (its run config). An unknown stage or field fails validation, naming it. `vars.<name>=v` sets a variable
    that the pipeline's strings use as `${name}`; a pipeline may `extend` another (config.variables).
    """
    path = Path(path)
    data = extend(read_yaml(path), path, read_yaml)
    return pipeline_config_from_dict(data, path.resolve().parent, overrides, source=str(path))


def _stage_override(stage: dict[str, Any], item: str) -> dict[str, Any]:
    """`stage` with one `<field path>=value` override: a stage field (run.optim.lr, mine.range_max, ewc.lambda,
    init_from) is set in place, except `run.*` on a stage whose run config is a file, which joins its `set` list as
    `*`; anything else (optim.lr) is a run-config override, added to `set`."""
    head = re.split(r"[.=]", item, maxsplit=1)[0]
    if head == "run" and "run" not in stage and "config" in stage:
        return {**stage, "set": [*stage.get("set", []), item[len("run."):]]}
    if head in StageConfig.model_fields and head not in ("name", "set"):  # a stage's own field, a kind's section too
        return apply_overrides(stage, [item])
    return {**stage, "set": [*stage.get("set", []), item]}


def pipeline_config_from_dict(
    data: dict[str, Any], base_dir: str | Path, overrides: Iterable[str] = (), source: str = "pipeline",
) -> PipelineConfig:
    """Validate a pipeline given as a dict (e.g. a preset edited in code), as `load_pipeline_config` does a file.

    `base_dir` is where relative stage `config:` paths are resolved (a preset's folder);
    a `base_dir` already in `data` wins. `data` itself is not modified.
    """
    data = copy.deepcopy(data)
    plain = []
    for item in overrides:
        match = re.match(r"^stages\.([A-Za-z0-9_-]+)\.(.+=.*)$", item.strip())
        if not match:
            plain.append(item)
            continue
        stages = [s for s in data.get("stages", []) if isinstance(s, dict) and s.get("name") == match.group(1)]
        if not stages:
            raise ConfigError(f"--set {item!r}: no stage named {match.group(1)!r}")
        stages[0].update(_stage_override(stages[0], match.group(2)))
    data = substitute(apply_overrides(data, plain), source)
    data.setdefault("base_dir", str(Path(base_dir).resolve()))
    _import_plugins(data.get("plugins"), source)
    pipeline = parse_config(data, PipelineConfig, source=source)
    earlier: dict[str, list[str]] = {"model": [], "pairs_file": []}  # earlier stages by what they make
    outputs: dict[str, list[str]] = {}  # earlier stages that write several files -> their names
    for stage in pipeline.stages:
        spec, section = stage.spec, stage.section
        content = section.model_dump(mode="json") if section is not None else stage_run_data(pipeline, stage)
        _check_output_references(stage.name, content, outputs, source)
        for field in spec.model_fields:
            value = getattr(section, field) or ""
            if value.startswith(STAGE_PREFIX) and value.removeprefix(STAGE_PREFIX) not in earlier["model"]:
                raise ConfigError(f"{source}: stage {stage.name!r}: {spec.name}.{field} names {value}, which is not "
                                  f"an earlier training stage (earlier training stages: {', '.join(earlier['model']) or 'none'})")
        if spec.section is None:  # a run config: its data paths, its objective's models, and the config itself
            _check_run_config(pipeline, stage, content, earlier, source)
        if spec.makes == "files":
            outputs[stage.name] = spec.outputs(section)
        elif spec.makes in earlier:
            earlier[spec.makes].append(stage.name)
    return pipeline


def _import_plugins(plugins: Any, source: str) -> None:
    """Import the pipeline's `plugins` (module names), so that the stage kinds they register are known here."""
    if not isinstance(plugins, list):
        return  # not a list: validation names the field
    for index, module in enumerate(plugins):
        if not isinstance(module, str):
            continue
        try:
            importlib.import_module(module)
        except (ImportError, ValueError, TypeError) as exc:  # ValueError: an empty name; TypeError: a relative one
            raise ConfigError(f"{source}: plugins.{index}: cannot import {module!r} ({type(exc).__name__}: {exc}); it must "
                              "be importable in every process that loads the pipeline (installed, or on PYTHONPATH)") from None


def _check_run_config(pipeline: PipelineConfig, stage: StageConfig, content: dict[str, Any],
                      earlier: Mapping[str, list[str]], source: str) -> None:
    """A training stage's references to earlier stages, and its run config with placeholders for their models."""
    writers = " or ".join(spec.name for spec in stage_specs() if spec.makes == "pairs_file")
    unknown = [n for n in stage_data_references(content) if n not in earlier["pairs_file"]]
    if unknown:
        raise ConfigError(f"{source}: stage {stage.name!r}: data paths name stage:{unknown[0]}, which is not an "
                          f"earlier {writers} stage (earlier {writers} stages: {', '.join(earlier['pairs_file']) or 'none'})")
    for field, name in objective_model_references(content):
        if name not in earlier["model"]:
            raise ConfigError(f"{source}: stage {stage.name!r}: {field} names stage:{name}, which is not an earlier "
                              f"training stage (earlier training stages: {', '.join(earlier['model']) or 'none'})")
    try:
        build_stage_config(pipeline, stage, "default", "runs", "check", ewc_anchor_model="default" if stage.ewc else None)
    except ConfigError as exc:
        raise ConfigError(f"{source}: stage {stage.name!r}: {exc}") from None


def _check_output_references(stage: str, content: Any, outputs: Mapping[str, list[str]], source: str) -> None:
    """Each `stage:<name>/<file>` in `content` names a file an earlier pairs stage writes."""
    for ref in stage_references(content):
        name, slash, output = ref.partition("/")
        if not slash and name in outputs:
            raise ConfigError(f"{source}: stage {stage!r}: stage:{name} is a pairs stage, which writes several files: "
                              f"name one of {', '.join(f'stage:{name}/{o}' for o in outputs[name])}")
        if slash and name not in outputs:
            raise ConfigError(f"{source}: stage {stage!r}: stage:{ref} names {name!r}, which is not an earlier pairs stage "
                              f"(earlier pairs stages: {', '.join(outputs) or 'none'})")
        if slash and output not in outputs[name]:
            raise ConfigError(f"{source}: stage {stage!r}: stage:{ref}: pairs stage {name!r} writes "
                              f"{', '.join(outputs[name])}, not {output!r}")
