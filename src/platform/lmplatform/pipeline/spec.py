"""`StageSpec`: what one kind of pipeline stage is, in one place, as `ObjectiveSpec` is for objectives.

A stage of a pipeline config names its kind by the one section it sets (`mine: {...}`, `pairs: {...}`,
`system: {...}`); a stage with none of them trains (`config:` or `run:`). Everything the pipeline does with a
stage is read from its kind's spec: the config validates the section and the references between stages
(`makes`, `model_fields`), the runner runs it, the stage cache keys it, pre-flight checks its files and models,
and a study reserves its CPUs, targets its metrics and registers its model (tune/). The registry is
`pipeline/kinds.py`: a new kind is its module (a section and a spec) plus one line there, or `register(SPEC)`.

The spec itself is light (pydantic and the section); what runs is in its `implementation` module, imported on
first use, with these functions (`StageImplementation`):

    run(ctx: StageContext) -> None                 run the stage, filling ctx.record (pipeline/stage_run.py helps)
    problems(ctx: StageCheck) -> list[Problem]     pre-flight: missing files and models, before anything runs
    reuse_content(ctx: StageContext) -> dict       what decides what the stage makes (its cache key)
    cpus(pipeline, stage) -> float                 CPUs it reserves at once (a study's trial needs as many)
    metric_names(pipeline, stage) -> set[str]      the metrics it reports (without the `<stage>/` prefix)
    registration(ctx: StageRegistrationContext) -> StageRegistration
                                                   kinds that `register`: what a study registers from the stage of its
                                                   best trial, and how the champion gate scores it
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Optional, Protocol, Sequence

from lmplatform.config.base import Section

STAGE_PREFIX = "stage:"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"  # a stage's name, a pairs stage's outputs (they name files)

if TYPE_CHECKING:
    from lmplatform.pipeline.config import PipelineConfig, StageConfig
    from lmplatform.pipeline.state import PipelineState, StageState
    from lmplatform.retrieval.settings import RetrievalValidationConfig, SearchSettings

# What a later stage may name with `stage:<name>`: the trained model (in init_from, an objective's model fields or a
# system's retriever), the one pairs file it writes (in data paths), or one of its files (`stage:<name>/<output>`).
Makes = Literal["model", "pairs_file", "files", "nothing"]


@dataclass(frozen=True)
class StageContext:
    """What a stage's implementation is given to run: the pipeline, the stage, its section with every `stage:`
    reference resolved, the model it starts from (kinds with `uses_init`), the run's state and its record."""

    pipeline: "PipelineConfig"
    stage: "StageConfig"
    section: Any
    init: Optional[str]
    state: "PipelineState"
    folder: Path  # the pipeline run's folder; the stage writes under folder / stage.name
    index: int
    outputs: Mapping[str, str]  # what finished stages made, by reference (`runner.stage_outputs`)
    parent: Any = None  # the pipeline's MLflow parent run
    callbacks: list[Any] = field(default_factory=list)  # Ray Train callbacks, for a stage that trains

    @property
    def record(self) -> "StageState":
        return self.state.stage(self.stage.name)

    @property
    def label(self) -> str:
        return f"stage {self.index + 1}/{len(self.pipeline.stages)} {self.stage.name}"


@dataclass(frozen=True)
class StageCheck:
    """What pre-flight gives a stage's `problems`: the stage, its section as written, where to say it is, the stages
    that will have run before it, and the models of stages finished earlier (a resume)."""

    pipeline: "PipelineConfig"
    stage: "StageConfig"
    section: Any
    where: str
    will_run: Sequence[str]
    finished: Mapping[str, str]


@dataclass(frozen=True)
class StageRegistrationContext:
    """What a study gives the stage of its best trial to say what it registers: the trial's pipeline, the stage, the
    run's state, what its finished stages made (`runner.stage_outputs`) and the stage's folder."""

    pipeline: "PipelineConfig"
    stage: "StageConfig"
    state: "PipelineState"
    outputs: Mapping[str, str]
    folder: Path


@dataclass(frozen=True)
class StageRegistration:
    """What a study registers from a stage (kinds that `register`), for the champion gate (tune/kinds/pipeline.py).

    - `source`: the training stage whose model is registered: the stage itself, or the one a system serves.
    - `default_name`: the registered model's name unless the study's champion section names one.
    - `selected_on`: a retrieval set the stage chose its settings on; a confirmation set must share no query with it.
    - `search`: the settings a retrieval system was measured with; the gate then compares systems, not models.
    - `text_metadata`: reads the metadata those settings' fusion needs, by text (only when the gate scores).
    - `publish(tracking_uri, name, version)`: makes the registered version servable as measured, before the gate.
    """

    source: str
    default_name: str
    selected_on: Optional["RetrievalValidationConfig"] = None
    search: Optional["SearchSettings"] = None
    text_metadata: Optional[Callable[[], Mapping[str, Mapping[str, Any]]]] = None
    publish: Optional[Callable[[str, str, str], Any]] = None


class StageImplementation(Protocol):
    def run(self, ctx: StageContext) -> None: ...
    def problems(self, ctx: StageCheck) -> list[Any]: ...
    def reuse_content(self, ctx: StageContext) -> dict[str, Any]: ...
    def cpus(self, pipeline: "PipelineConfig", stage: "StageConfig") -> float: ...
    def metric_names(self, pipeline: "PipelineConfig", stage: "StageConfig") -> set[str]: ...


@dataclass(frozen=True)
class StageSpec:
    """One kind of pipeline stage.

    - `name`: the kind, and the stage's config key of its section (none for the training kind).
    - `section`: the pydantic model of that section; None for the kind whose config is a run config (`train`).
    - `description`: the section's help, as the config reference shows it.
    - `implementation`: the module with the functions of `StageImplementation`.
    - `makes`: what a later stage may name with `stage:<name>` (`Makes`).
    - `outputs`: for `makes: files`, the names of the files a section writes (`stage:<name>/<output>`).
    - `uses_init`: it reads `init_from` (the model it starts from or works with).
    - `trains`: it runs Ray Train, so its reports go to a study as they happen (and are replayed when it is reused).
    - `registers`: it may register a model version, so a study may register its winner from it.
    - `model_fields`: fields of the section naming a model: `stage:<name>` there must be an earlier training stage.
    - `study_overrides`: `--set` items (relative to the stage) that a study's trials apply: a trial registers
      nothing (the study registers its winner through the champion gate).
    """

    name: str
    section: Optional[type[Section]]
    description: str
    implementation: str
    makes: Makes
    outputs: Callable[[Any], list[str]] = lambda section: []
    uses_init: bool = False
    trains: bool = False
    registers: bool = False
    model_fields: tuple[str, ...] = ()
    study_overrides: tuple[str, ...] = ()

    def module(self) -> StageImplementation:
        return importlib.import_module(self.implementation)  # type: ignore[return-value]
