"""Search spaces as data: one `tune_spaces/*.yaml` file describes one study.

A space is checked completely before any trial starts: ranges must be non-empty, and its trial kind's `check`
(tune/trial_kinds.py) applies each parameter path (with its sampled extremes) as an override to the base config it
runs and validates the result, and requires the metric to be one its trials report. Every error names the YAML line
it comes from.
"""
from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any, Callable, Literal, Optional, TypeVar, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import ConfigError, apply_overrides, parse_yaml, read_yaml
from lmplatform.config.variables import VARS_KEY, extend, substitute
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig
from lmplatform.retrieval.settings import RetrievalValidationConfig
from lmplatform.runtime import project_root
from lmplatform.tracking.mlflow_tracking import flatten
from lmplatform.tune import trial_kinds
from lmplatform.tune.metrics import is_corpus_metric
from lmplatform.tune.trial_spec import TrialSpec

T = TypeVar("T")


class SpaceError(ConfigError):
    """A search space that cannot be run; the message names file, line and the allowed values."""


class Parameter(Section):
    """One searched value. `when` makes it conditional on other values (searched or from the base config)."""

    distribution: Literal["uniform", "loguniform", "int", "randint", "choice"]
    low: Optional[float] = None
    high: Optional[float] = None
    step: Optional[float] = Field(None, gt=0, description="Quantisation for uniform/int.")
    values: Optional[list[Any]] = None
    when: dict[str, Any] = Field(default_factory=dict, description="Sample only if these paths have these values.")

    @model_validator(mode="after")
    def _range_is_usable(self) -> "Parameter":
        if self.distribution == "choice":
            if not self.values:
                raise ValueError("choice needs a non-empty 'values' list")
            if self.low is not None or self.high is not None:
                raise ValueError("choice takes 'values', not low/high")
            return self
        if self.values is not None:
            raise ValueError(f"{self.distribution} takes low/high, not 'values'")
        if self.low is None or self.high is None:
            raise ValueError(f"{self.distribution} needs both 'low' and 'high'")
        if not self.low < self.high:
            raise ValueError(f"empty range: low ({self.low:g}) must be < high ({self.high:g})")
        if self.distribution == "loguniform" and self.low <= 0:
            raise ValueError(f"loguniform needs low > 0, got {self.low:g}")
        if self.distribution in ("int", "randint") and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError(f"{self.distribution} needs whole-number bounds, got {self.low:g}..{self.high:g}")
        return self

    def sample_values(self) -> list[Any]:
        """Values that stand for the whole range when checking the base config accepts it."""
        if self.distribution == "choice":
            return list(self.values or [])
        if self.distribution in ("int", "randint"):
            return [int(self.low), int(self.high)]  # type: ignore[arg-type]
        return [self.low, self.high]

    def suggest(self, trial: Any, name: str) -> Any:
        """Ask an Optuna trial (or Ray's captor of one) for this parameter."""
        if self.distribution == "choice":
            return trial.suggest_categorical(name, self.values)
        if self.distribution in ("int", "randint"):
            return trial.suggest_int(name, int(self.low), int(self.high), step=int(self.step or 1))  # type: ignore[arg-type]
        if self.distribution == "loguniform":
            return trial.suggest_float(name, self.low, self.high, log=True)
        return trial.suggest_float(name, self.low, self.high, step=self.step)


class ObjectiveTarget(Section):
    metric: str
    mode: Literal["min", "max"]


class SchedulerSpec(Section):
    name: Literal["asha", "fifo"] = "fifo"
    metric: Optional[str] = Field(
        None, description="What ASHA compares at its milestones, when the study's metric comes only at the end of a "
        "trial (a pipeline's evaluation): e.g. its training stage's biencoder/val_ir_mrr_at_10. Default: the study's metric.")
    mode: Optional[Literal["min", "max"]] = Field(None, description="Whether scheduler.metric is better low or high. "
                                                  "Default: the study's mode.")
    grace_period: int = Field(1, ge=1, description="Reports a trial always gets before ASHA may stop it.")
    reduction_factor: float = Field(2.0, gt=1.0)
    max_t: int = Field(100, ge=1, description="Reports (training_iteration) after which a trial stops.")

    @model_validator(mode="after")
    def _grace_fits(self) -> "SchedulerSpec":
        if self.grace_period > self.max_t:
            raise ValueError(f"grace_period ({self.grace_period}) must be <= max_t ({self.max_t})")
        return self


class TrialResources(Section):
    """What one trial's driver (train and pipeline trials) or the whole trial (function trials) reserves."""

    cpu: Optional[float] = Field(None, ge=0.0, description="Default: 0 for train and pipeline trials (the driver only "
                                 "waits; Ray Train workers, mining actors and a system stage's task reserve their own "
                                 "CPUs, and a driver holding even 0.01 of 2 CPUs starves a stage that wants both), 0.01 "
                                 "for function trials, which do the work: give them CPUs; 1 for evaluation trials.")
    gpu: float = Field(0.0, ge=0.0)


class ScoredPairsSpec(Section):
    """A file of scored sentence pairs (STS-B, SICK), for the general-capability probes."""

    path: str
    where: dict[str, Any] = Field(default_factory=dict, description="Only rows whose fields equal these, e.g. {split: dev}.")
    sentence1_field: str = "sentence1"
    sentence2_field: str = "sentence2"
    score_field: str = "score"
    scale: tuple[float, float] = Field((0.0, 5.0), description="Gold score range.")
    limit: Optional[int] = Field(None, ge=1, description="Read at most this many pairs.")


class GeneralPackSpec(Section):
    """What the champion must not forget: probes scored for the candidate and the model it would replace.

    Each probe present is run; the candidate is refused if any probe drops by more than `tolerance`.
    """

    sts: Optional[ScoredPairsSpec] = Field(None, description="Spearman of cosine similarity against gold (e.g. STS-B dev).")
    paraphrase: list[ScoredPairsSpec] = Field(
        default_factory=list, description="Paraphrase retrieval (MRR@10): pairs scored in the top `paraphrase_min_share` "
        "of their scale are query and answer, ranked against every second sentence of the files.")
    paraphrase_min_share: float = Field(0.8, gt=0.0, le=1.0)
    old_domain: Optional[str] = Field(
        None, description="Old-domain text (a file of the earlier stage): masked-LM loss, only where both models "
        "carry a trained MLM head.")
    old_domain_texts: int = Field(128, ge=1)
    evaluations: list[StageEvaluationConfig] = Field(
        default_factory=list, description="Registered evaluations that score one model (as a pipeline stage's "
        "evaluations: retrieval, old_domain_mlm_loss, or one registered outside the package), each a probe on its "
        "score (higher is better), named by its label.")
    tolerance: float = Field(0.01, ge=0.0, description="Largest allowed drop of any probe (loss: largest rise).")

    @model_validator(mode="after")
    def _has_a_probe(self) -> "GeneralPackSpec":
        if self.sts is None and not self.paraphrase and self.old_domain is None and not self.evaluations:
            raise ValueError("a general pack needs at least one probe: sts, paraphrase, old_domain or evaluations")
        return self


class ChampionSpec(Section):
    """How the study's best trial is registered and when it takes the alias (docs/tuning.md#the-champion-gate)."""

    registered_model: Optional[str] = Field(None, description="Default: the base config's registered model name.")
    alias: str = Field("champion", min_length=1)
    register_best: bool = Field(True, description="Register the best train trial's model and consider it for the alias.")
    stage: Optional[str] = Field(None, description="Pipeline trials: the stage whose model is registered: a training "
                                 "stage, or a system stage (its bi-encoder with its index, settings and re-ranker). "
                                 "Default: the last of them.")
    confirm: Optional[RetrievalValidationConfig] = Field(
        None, description="A held-out retrieval set no trial saw (pairs, split, distractors): the candidate and the model "
        "it would replace are both scored on it, query by query. Required when the study targets a val_ir_* metric.")
    confirm_metric: Optional[str] = Field(
        None, description="The per-query metric of `confirm` that decides, e.g. ir_ndcg_at_10. Default: the study's "
        "metric without its val_ prefix.")
    level: float = Field(0.95, gt=0.5, lt=1.0, description="Confidence level of the paired bootstrap interval of the gain.")
    resamples: int = Field(2000, ge=100, description="Bootstrap resamples.")
    seed: int = Field(0, description="Seeds the bootstrap.")
    baseline: Literal["base_model", "none"] = Field(
        "base_model", description="What a first champion must beat: the model its trials started from, or nothing.")
    general: Optional[GeneralPackSpec] = Field(None, description="Forgetting check: probes the candidate must not regress on.")


class SearchSpace(Section):
    study: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    trial: str = Field("train", description="What one trial runs: train (a run config), function (a Python "
                       "function), pipeline, evaluation, or a kind registered outside the package (tune/trial_spec.py).")
    trial_args: dict[str, Any] = Field(default_factory=dict, description="Settings of a trial kind registered outside "
                                       "the package; its `check` validates them.")
    requires: list[str] = Field(default_factory=list, description="Objectives this study needs (train trials).")
    base_config: Optional[str] = Field(None, description="Run config a train trial starts from (relative to the project).")
    base_pipeline: Optional[str] = Field(
        None, description="Pipeline a pipeline trial runs (relative to the project); parameters address its stages' "
        "fields by stage name (stages.biencoder.run.optim.lr, stages.negatives.mine.range_max), and the metric is a "
        "stage's report, <stage>/<metric>. Stages identical across trials run once (reuse).")
    base_evaluation: Optional[str] = Field(
        None, description="Evaluation config an evaluation trial runs (relative to the project), as `lmp evaluate` "
        "runs it; parameters address its fields, a list's entries by name (tasks.classification.knn_k, "
        "tasks.retrieval.retrievers.hybrid.hybrid.rrf_k), and the metric is one of its report's "
        "(<task>.<dataset>...). Score trials on a dev split: a study chooses on what it reads.")
    overrides: list[str] = Field(default_factory=list, description="`a.b=c` applied to the base config (pipeline, "
                                 "evaluation) before the trial's own values.")
    function: Optional[str] = Field(None, description="module:callable for function trials.")
    function_args: dict[str, Any] = Field(default_factory=dict, description="Fixed keyword values passed to the function.")
    reports: list[str] = Field(default_factory=list, description="Metrics a function trial reports.")
    parameters: dict[str, Parameter] = Field(..., min_length=1)
    metric: str
    mode: Literal["min", "max"]
    objectives: list[ObjectiveTarget] = Field(default_factory=list, description="Extra targets for multi-objective TPE.")
    num_samples: int = Field(8, ge=1)
    max_concurrent: Union[int, Literal["auto"]] = Field(
        2, description="Trials at a time (>= 1). 'auto' (pipeline trials): as many as the cluster's CPUs hold, each "
        "trial needing what its largest stage reserves (training workers, mining actors).")
    seed: Optional[int] = 7
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    resources: TrialResources = Field(default_factory=TrialResources)
    champion: ChampionSpec = Field(default_factory=ChampionSpec)
    storage_path: str = Field("runs/tune", description="Where Tune keeps study state (resume reads it).")

    @field_validator("trial")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        try:
            trial_kinds.trial_spec(value)
        except KeyError as exc:
            kinds = "; ".join(f"{name}: {trial_kinds.trial_spec(name).description}"
                              for name in trial_kinds.trial_kind_names())
            raise ValueError(f"{exc.args[0]} ({kinds})") from None
        return value

    @property
    def kind(self) -> TrialSpec:
        return trial_kinds.trial_spec(self.trial)

    @model_validator(mode="after")
    def _kind_fields(self) -> "SearchSpace":
        kind = self.kind
        if kind.runs and not getattr(self, kind.runs):
            raise ValueError(f"{self.trial} trials need '{kind.runs}' ({kind.runs_what})")
        if self.trial_args and kind in trial_kinds.BUILTIN:
            raise ValueError(f"trial_args: the settings of a kind registered outside the package; {self.trial} trials "
                             "take none: remove it")
        if self.objectives and self.scheduler.name == "asha":
            raise ValueError("multi-objective studies cannot use the asha scheduler (it needs one metric); use fifo")
        if isinstance(self.max_concurrent, int) and self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1 or 'auto', got {self.max_concurrent}")
        if self.max_concurrent == "auto" and not kind.sizes_concurrency:
            sized = [name for name in trial_kinds.trial_kind_names() if trial_kinds.trial_spec(name).sizes_concurrency]
            raise ValueError(f"max_concurrent 'auto' sizes {' and '.join(sized)} trials by what they reserve; give "
                             f"{self.trial} trials a number")
        if self.scheduler.metric and self.scheduler.name != "asha":
            raise ValueError("scheduler.metric is what ASHA compares; the fifo scheduler stops nothing: remove it")
        return self

    def trial_cpus(self) -> float:
        """What one trial reserves: `resources.cpu`, or the default of its kind (see TrialResources)."""
        return self.resources.cpu if self.resources.cpu is not None else self.kind.cpus

    @property
    def targets(self) -> list[ObjectiveTarget]:
        return [ObjectiveTarget(metric=self.metric, mode=self.mode), *self.objectives]


class LoadedSpace(BaseModel):
    """A validated space plus what was resolved while checking it: `base`, the validated config its trials start from
    (a `RunConfig`, `PipelineConfig` or `EvaluationConfig`, as its kind's `check` returns; None for function trials)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: Path
    space: SearchSpace
    base: Optional[Any] = None
    base_overrides: list[str] = Field(default_factory=list)

    def trial_overrides(self, params: dict[str, Any]) -> list[str]:
        return [*self.base_overrides, *param_overrides(params)]

    @property
    def base_path(self) -> Path:
        """The file the kind's `runs` field names, resolved against the project."""
        return resolve_project_path(getattr(self.space, self.space.kind.runs or "") or "")


def split_overrides(overrides: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """`--set` values for the space itself (num_samples=4, function_args.k=3) vs for the base run config."""
    space_sets, run_sets = [], []
    for item in overrides:
        head = item.partition("=")[0].strip().split(".")[0]
        (space_sets if head in SearchSpace.model_fields or head == VARS_KEY else run_sets).append(item)
    return space_sets, run_sets


def resolve_project_path(path: str) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    if candidate.exists():
        return candidate.resolve()
    return (project_root() / candidate).resolve()


def import_callable(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected module:callable, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} ({exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{module_name!r} has no callable {attr!r}")
    return fn


def param_overrides(params: dict[str, Any]) -> list[str]:
    """A trial's values as `--set`-style overrides of the run config."""
    return [f"{key}={_yaml_scalar(value)}" for key, value in params.items()]


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


# -- line tracking -----------------------------------------------------------
class SpaceLines:
    """YAML key path -> line number (1-based), from the composed node tree."""

    def __init__(self, text: str):
        self.lines: dict[tuple[Any, ...], int] = {}
        try:
            root = yaml.compose(text)
        except yaml.YAMLError:
            root = None
        if root is not None:
            self._walk(root, ())

    def _walk(self, node: yaml.Node, path: tuple[Any, ...]) -> None:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*path, key.value)
                self.lines[child] = key.start_mark.line + 1
                self._walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._walk(item, (*path, index))

    def line(self, path: tuple[Any, ...]) -> Optional[int]:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


def where(source: Path, lines: SpaceLines, path: tuple[Any, ...]) -> str:
    line = lines.line(path)
    return f"{source}:{line}" if line else str(source)


def _pydantic_errors(exc: ValidationError, source: Path, lines: SpaceLines) -> str:
    out = [f"invalid search space {source}: {exc.error_count()} problem(s)"]
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        field = ".".join(str(p) for p in loc) or "<root>"
        if err["type"] == "extra_forbidden":
            msg = f"unknown key; allowed: {', '.join(sorted(_allowed_keys(loc)))}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = f"got {err.get('input')!r}; {err['msg']}".replace("Value error, ", "")
        out.append(f"  {where(source, lines, loc)}: {field}: {msg}")
    return "\n".join(out)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = SearchSpace
    for part in loc[:-1]:
        if model is SearchSpace and part == "parameters":
            model = Parameter
            continue
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None) if field else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return list(model.model_fields)


# -- loading -----------------------------------------------------------------
def load_space(path: str | Path, extra_overrides: list[str] | tuple[str, ...] = ()) -> LoadedSpace:
    """Parse and fully validate a space file; raise `SpaceError` naming the offending line."""
    source = Path(path)
    if not source.is_file():
        raise SpaceError(f"search space not found: {source}")
    text = source.read_text(encoding="utf-8")
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise SpaceError(f"{source}: not valid YAML: {exc}") from None
    lines = SpaceLines(text)
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: the top level must be a mapping (study, parameters, metric, ...)")
    space_sets, run_sets = split_overrides(extra_overrides)
    try:
        data = apply_overrides(extend(data, source, read_yaml), space_sets)
        variables = data.get(VARS_KEY) or {}
        data = substitute(data, str(source))
    except ConfigError as exc:
        raise SpaceError(str(exc)) from None
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(_pydantic_errors(exc, source, lines)) from None
    if run_sets and not space.kind.has_base_config:
        raise SpaceError(f"{source}: --set {run_sets[0]!r}: {space.trial} trials have no base config; "
                         f"set a space field instead ({', '.join(SearchSpace.model_fields)})")
    # A pipeline study's variables are its pipeline's too (the data root a recipe reads, set once for both).
    shared = [f"{VARS_KEY}.{name}={_yaml_scalar(value)}" for name, value in variables.items()
              if value is not None and space.kind.shares_variables]
    loaded = LoadedSpace(path=source, space=space, base_overrides=[*shared, *space.overrides, *run_sets])
    loaded.base = space.kind.module().check(loaded, lines)
    return loaded


def load_base(loaded: LoadedSpace, lines: SpaceLines, what: str,
              load: Callable[[Path, list[str]], T]) -> tuple[T, Callable[[str], T]]:
    """The space's base config (the file its kind's `runs` field names) with the space's overrides, and a loader of it
    with one override more, for the parameters' checks; a missing file or an invalid result is a SpaceError."""
    path, field = loaded.base_path, loaded.space.kind.runs or ""
    if not path.is_file():
        raise SpaceError(f"{where(loaded.path, lines, (field,))}: {field} {getattr(loaded.space, field)!r} not found ({path})")
    try:
        base = load(path, loaded.base_overrides)
    except ConfigError as exc:
        raise SpaceError(f"{where(loaded.path, lines, ('overrides',))}: {what} with the space's overrides is "
                         f"invalid:\n{exc}") from None
    return base, lambda override: load(path, [*loaded.base_overrides, override])


def check_values(loaded: LoadedSpace, lines: SpaceLines, name: str, param: Parameter, what: str,
                  load: Callable[[str], object]) -> None:
    """Each sampled extreme of a parameter, applied as an override by `load`, must give a valid config."""
    for value in param.sample_values():
        try:
            load(f"{name}={_yaml_scalar(value)}")
        except ConfigError as exc:
            raise SpaceError(f"{where(loaded.path, lines, ('parameters', name))}: parameter {name!r} with value {value!r} "
                             f"does not fit {what}:\n{exc}") from None


def check_champion(loaded: LoadedSpace, lines: SpaceLines) -> None:
    """A retrieval study's winner must be confirmed on data no trial saw, with a metric that set reports."""
    space, source = loaded.space, loaded.path
    champion = space.champion
    if not champion.register_best:
        return
    if is_corpus_metric(space.metric) and champion.confirm is None:
        raise SpaceError(
            f"{where(source, lines, ('champion',))}: a study that targets {space.metric!r} must confirm its winner on a "
            "held-out retrieval set no trial saw: set champion.confirm (pairs, split, distractors), or "
            "champion.register_best: false"
        )
    if champion.confirm is not None:
        metric = gate_metric(space)
        known = {f"val_{m}" for m in champion.confirm.per_query_metric_names()}
        if f"val_{metric}" not in known:
            raise SpaceError(
                f"{where(source, lines, ('champion', 'confirm_metric'))}: the gate's metric {metric!r} is not one the "
                f"confirmation set reports; choose one of {', '.join(sorted(m[4:] for m in known))}"
            )
        pairs = champion.confirm.pairs
        if pairs is None:
            raise SpaceError(f"{where(source, lines, ('champion', 'confirm'))}: champion.confirm.pairs is required "
                             "(the held-out pairs, e.g. a file kept apart with split: all)")


def target_keys(space: SearchSpace) -> list[tuple[tuple[Any, ...], str]]:
    """(YAML key path, metric) of each target: the study's metric, then its extra objectives'."""
    return [(("metric",) if i == 0 else ("objectives", i - 1, "metric"), t.metric) for i, t in enumerate(space.targets)]


def gate_metric(space: SearchSpace) -> str:
    """The per-query metric the champion gate decides on (`ir_*` naming)."""
    return space.champion.confirm_metric or space.metric.rsplit("/", 1)[-1].removeprefix("val_")

def condition_holds(param: Parameter, chosen: dict[str, Any], fixed: dict[str, Any]) -> bool:
    for key, wanted in param.when.items():
        value = chosen[key] if key in chosen else fixed.get(key)
        if isinstance(value, float) and isinstance(wanted, (int, float)):
            if not math.isclose(value, float(wanted)):
                return False
        elif value != wanted:
            return False
    return True


class DefineByRun:
    """An Optuna define-by-run space: conditional parameters are suggested only when their `when` holds.

    A class rather than a closure: Tune pickles the searcher into the study state for resume.
    """

    def __init__(self, parameters: dict[str, Parameter], fixed: dict[str, Any]):
        self.parameters = parameters
        self.fixed = fixed

    def __call__(self, trial: Any) -> Optional[dict[str, Any]]:
        chosen: dict[str, Any] = {}
        for name, param in self.parameters.items():
            if condition_holds(param, chosen, self.fixed):
                chosen[name] = param.suggest(trial, name)
        return None


def define_by_run(loaded: LoadedSpace) -> DefineByRun:
    fixed: dict[str, Any] = dict(loaded.space.function_args)
    if isinstance(loaded.base, BaseModel):  # a condition may read a field of the base config
        fixed.update(flatten(loaded.base.model_dump(mode="json")))
    return DefineByRun(dict(loaded.space.parameters), fixed)
