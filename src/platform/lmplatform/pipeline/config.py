"""The pipeline config: an ordered list of stages, each a run config plus how it chains.

A bad pipeline (unknown key, a stage that names a later stage, a stage whose run
config is invalid) fails at load time, before any stage runs.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Optional

from pydantic import ConfigDict, Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import ConfigError, apply_overrides, parse_config, read_yaml
from lmplatform.config.schema import DataConfig
from lmplatform.config.variables import extend, substitute
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig
from lmplatform.objectives.registry import objective_names, objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.retrieval.settings import DistractorConfig, MetadataFusionConfig, RetrievalValidationConfig, SearchSettings

STAGE_PREFIX = "stage:"
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"


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


class MineConfig(Section):
    """A `mine` stage: hard negatives for every pair of `pairs`, mined with the stage's model (`init_from`)
    and written as a JSONL pairs file with a `hard_negatives` list (retrieval/mining.py has the rules)."""

    pairs: DataConfig = Field(..., description="The pairs to mine for; every pair of these files is mined (their "
                              "split is the training stage's business). Fields and cleaning as in a run's `data`.")
    distractors: Optional[DistractorConfig] = Field(
        None, description="Documents that join the pairs' documents as candidates (e.g. the whole report corpus).")
    num_negatives: int = Field(3, ge=1, description="Hard negatives per pair, at most.")
    range_min: int = Field(0, ge=0, description="Skip the first range_min ranks (0-based; the query's group, the query "
                           "and the positive are never ranked): the very top holds the unlabelled duplicates.")
    range_max: int = Field(50, ge=1, description="Candidates ranked at range_max or below are not considered.")
    relative_margin: Optional[float] = Field(
        0.05, ge=0.0, lt=1.0, description="Drop a candidate scoring above positive - |positive| x margin (as "
        "sentence-transformers' mine_hard_negatives); null keeps every candidate of the window.")
    cross_encoder: Optional[str] = Field(
        None, description="A cross-encoder (folder or models:/...) that scores the remaining candidates; those above "
        "max_cross_encoder_score are dropped as likely false negatives.")
    max_cross_encoder_score: float = Field(0.5, ge=0.0, le=1.0, description="Relevance probability above which the "
                                           "cross-encoder calls a candidate a duplicate.")
    batch_size: int = Field(64, ge=1, description="Texts per forward pass when encoding.")
    max_seq_length: Optional[int] = Field(None, ge=8, description="Longer texts are truncated; default: the model's.")
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32", description="Autocast type of the encoding: bf16 is about 1.8x fp32 on CPUs with AVX512-BF16 or AMX; "
        "'auto' takes it where the actor's device has it in hardware. Negatives are chosen by rank, which bf16's "
        "rounding rarely changes (MiniLM on OpenOffice: 99.6% of the top 50 neighbours the same).")
    actors: int = Field(1, ge=1, description="Ray actors encoding the texts, each holding the model.")
    cpus_per_actor: float = Field(1.0, gt=0.0)

    @model_validator(mode="after")
    def _window_holds_the_negatives(self) -> "MineConfig":
        if self.range_min >= self.range_max:
            raise ValueError(f"mine.range_min ({self.range_min}) must be below mine.range_max ({self.range_max})")
        if self.num_negatives > self.range_max - self.range_min:
            raise ValueError(f"mine.num_negatives ({self.num_negatives}) must be at most range_max - range_min "
                             f"({self.range_max - self.range_min})")
        return self


class HoldoutConfig(Section):
    """Cut one split in two by duplicate group, e.g. dev into a part that selects and a part that confirms."""

    split: str = Field("dev", min_length=1, description="The split to cut; its file is replaced by the two parts.")
    into: tuple[str, str] = Field(("dev_select", "dev_confirm"), description="Names of the two parts (outputs of the stage).")
    fraction: float = Field(0.5, gt=0.0, lt=1.0, description="Share of the split's groups that go to the second part.")
    seed: int = Field(0, description="Salts the group hash that assigns each group to a part.")


class PairsConfig(Section):
    """A `pairs` stage: one pairs file per split from a report corpus and its duplicate relations, each pair with
    its duplicate group (what `lmp data pairs` writes). Later stages name a file as `stage:<name>/<split>`."""

    corpus: str = Field(..., min_length=1, description="JSONL of reports, one object per line.")
    relations: str = Field(..., min_length=1, description="JSONL of duplicate pairs (or links, with format: links).")
    format: Literal["pairs", "links"] = "pairs"
    fields: list[str] = Field(["title", "description"], min_length=1, description="Report fields joined into a text.")
    id_field: str = "id"
    query_id_field: str = "duplicate_id"
    target_id_field: str = "master_id"
    split_field: str = Field("split", description="Field of the relation rows naming the split.")
    splits: list[str] = Field(["train", "dev", "test"], min_length=1, description="Splits to write.")
    holdout: Optional[HoldoutConfig] = None
    limit: Optional[int] = Field(None, ge=1, description="At most this many pairs per split (smoke runs).")

    @model_validator(mode="after")
    def _outputs_are_distinct(self) -> "PairsConfig":
        if len(set(self.splits)) != len(self.splits):
            raise ValueError(f"pairs.splits names a split twice: {self.splits}")
        if self.holdout is not None:
            if self.holdout.split not in self.splits:
                raise ValueError(f"pairs.holdout.split {self.holdout.split!r} "
                                 f"is not one of pairs.splits ({', '.join(self.splits)})")
            clash = set(self.holdout.into) & (set(self.splits) - {self.holdout.split})
            if clash or self.holdout.into[0] == self.holdout.into[1]:
                raise ValueError(f"pairs.holdout.into {list(self.holdout.into)} must be two new names, distinct from the splits")
            for name in self.holdout.into:
                if not re.match(_NAME, name):
                    raise ValueError(f"pairs.holdout.into: {name!r} must match {_NAME}")
        for name in self.splits:
            if not re.match(_NAME, name):
                raise ValueError(f"pairs.splits: {name!r} must match {_NAME} (it names a file)")
        return self

    def outputs(self) -> list[str]:
        """The files the stage writes, by name (`stage:<stage>/<output>`)."""
        if self.holdout is None:
            return list(self.splits)
        return [part for split in self.splits
                for part in (self.holdout.into if split == self.holdout.split else (split,))]


class SystemChoiceConfig(Section):
    """Values to try on the `select` set; the best on `metric` is kept (an empty list keeps `search`'s value)."""

    bm25_weights: list[float] = Field(default_factory=list, description="BM25 weights of the hybrid first stage, e.g. "
                                      "[0, 0.1, ..., 0.5].")
    rerank_depths: list[int] = Field(default_factory=list, description="First-stage hits the re-ranker re-scores.")
    rerank_weights: list[float] = Field(default_factory=list, description="Weights of the re-ranker's score in the mix "
                                        "with the first stage's (1: the re-ranker's order alone).")
    metric: str = Field("ir_mrr_at_10", description="The per-query metric of `select` that decides.")

    @model_validator(mode="after")
    def _in_range(self) -> "SystemChoiceConfig":
        for name in ("bm25_weights", "rerank_weights"):
            if any(not 0.0 <= w <= 1.0 for w in getattr(self, name)):
                raise ValueError(f"choose.{name} must be values in [0, 1], got {getattr(self, name)}")
        if any(d < 1 for d in self.rerank_depths):
            raise ValueError(f"choose.rerank_depths must be >= 1, got {self.rerank_depths}")
        return self


class SystemIndexConfig(Section):
    """The index the registered system is served from: FAISS and BM25 over a corpus, with its document store."""

    corpus: str = Field(..., min_length=1, description="JSONL of the documents to serve (e.g. every report).")
    fields: list[str] = Field(["title", "text"], min_length=1, description="Fields joined with '. ' into the text "
                              "that is encoded and BM25-indexed (as the select set's distractors join them).")
    id_field: str = "id"
    kind: Literal["flat", "hnsw", "ivf", "ivfpq", "auto"] = "auto"
    cpus_per_actor: float = Field(1.0, gt=0.0, description="The encoding actor's CPUs.")
    metadata_fields: list[str] = Field(default_factory=list, description="Fields kept as each document's metadata in "
                                       "the store (what a metadata fusion reads: product, component, created...).")


class SystemMetadataConfig(Section):
    """A metadata fusion for the system (lmplatform/retrieval/metadata_fusion.py): fitted on `fit`'s queries once per
    `regularizations` value, the best on `select` kept with the settings, and the mode when it beats the first stage
    chosen before it. The texts' metadata is read from `corpus`, each document found by its text."""

    corpus: list[str] = Field(..., min_length=1, description="JSONL of documents with the metadata fields (e.g. every "
                              "report), the same documents the pairs and distractors were made from.")
    fields: list[str] = Field(["title", "text"], min_length=1, description="Fields joined with '. ' into a document's "
                              "text, as the pairs' texts and the distractors join them (how a text finds its metadata).")
    fit: RetrievalValidationConfig = Field(..., description="The training queries the fusion is fitted on: pairs "
                                           "(e.g. the train split) ranked against their documents and distractors.")
    fusion: MetadataFusionConfig = Field(default_factory=MetadataFusionConfig)
    regularizations: list[float] = Field([0.1, 1.0, 10.0], min_length=1, description="Values of the fusion's "
                                         "regularization (C) fitted and tried on `select`.")

    @model_validator(mode="after")
    def _positive_regularizations(self) -> "SystemMetadataConfig":
        if any(c <= 0 for c in self.regularizations):
            raise ValueError(f"metadata.regularizations must be > 0, got {self.regularizations}")
        return self


class SystemRegisterConfig(Section):
    """Where the chosen system is registered: the retriever's version carries the settings, the index and a link to
    the re-ranker's own version."""

    name: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="Registered model of the retriever.")
    reranker_name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                                         description="Registered model of the re-ranker (default: <name>-reranker).")


class SystemConfig(Section):
    """A `system` stage: the retrieval system a pipeline ends with, its settings chosen on a dev set, measured as it
    is served (lmplatform/evaluation/system.py), then indexed and registered."""

    retriever: str = Field(..., min_length=1, description="The bi-encoder: stage:<name>, a folder, 'default' or models:/...")
    reranker: Optional[str] = Field(None, min_length=1, description="A cross-encoder re-ranking the first stage's top "
                                    "hits: stage:<name>, a folder or models:/...; null: none.")
    select: RetrievalValidationConfig = Field(..., description="Where settings are chosen and the stage's metrics "
                                              "measured: dev pairs ranked against the corpus (pairs, split, distractors).")
    search: SearchSettings = Field(default_factory=SearchSettings, description="The settings; `choose` replaces the "
                                   "values it tries. Its `reranker` is set from `reranker` above.")
    choose: SystemChoiceConfig = Field(default_factory=SystemChoiceConfig)
    metadata: Optional[SystemMetadataConfig] = Field(None, description="Fit a metadata fusion and choose it on `select` "
                                                     "like the other settings; null: dense and BM25 only.")
    max_seq_length: Optional[int] = Field(None, ge=8, description="Encoder length; default: the model's.")
    cpus: float = Field(1.0, gt=0.0, description="CPUs of the Ray task that measures the system (its encoder and "
                        "re-ranker run there, one thread per CPU).")
    index: Optional[SystemIndexConfig] = Field(None, description="Build the served index (when the system is registered).")
    register_as: Optional[SystemRegisterConfig] = Field(None, description="Register the system (skipped in study trials: "
                                                     "the study registers its winner).")

    @model_validator(mode="after")
    def _pairs_and_index(self) -> "SystemConfig":
        if self.select.pairs is None:
            raise ValueError("system.select.pairs is required: the dev pairs the settings are chosen on")
        if self.search.mode == "metadata" or self.search.metadata_fusion is not None:
            raise ValueError("system.search: mode 'metadata' and its metadata_fusion are chosen by the stage: set "
                             "system.metadata (the fusion is fitted on its queries) and search.mode 'dense' or 'hybrid'")
        if self.register_as is not None and self.index is None:
            raise ValueError("system.register_as needs system.index: a registered system is served from its index")
        if self.choose.rerank_depths or self.choose.rerank_weights:
            if self.reranker is None:
                raise ValueError("system.choose tries re-rank settings, but system.reranker is not set")
        return self


class StageConfig(Section):
    name: str = Field(..., pattern=_NAME)
    config: Optional[str] = Field(None, description="A run config YAML (relative to the pipeline file).")
    run: Optional[dict[str, Any]] = Field(None, description="An inline run config (instead of `config`).")
    mine: Optional[MineConfig] = Field(
        None, description="A mining stage instead of a training one: writes the pairs with hard negatives; a later "
        "stage reads them with `stage:<name>` in data.train_paths.")
    pairs: Optional[PairsConfig] = Field(
        None, description="A data stage: pairs files per split from a corpus and its duplicate relations; a later "
        "stage names one as `stage:<name>/<split>`.")
    system: Optional[SystemConfig] = Field(
        None, description="The retrieval system: a trained bi-encoder (and re-ranker) with BM25 fusion and re-rank "
        "settings chosen on dev, indexed and registered.")
    set: list[str] = Field(default_factory=list, description="--set style overrides applied to the run config.")
    init_from: str = Field(
        "default", description="stage:<name> (that stage's model), models:/<name>@<alias>, a folder, or 'default'; "
        "for a mine stage, the bi-encoder that mines.")
    ewc: Optional[StageEWCConfig] = None
    evaluations: list[StageEvaluationConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_run_source(self) -> "StageConfig":
        if sum(source is not None for source in (self.config, self.run, self.mine, self.pairs, self.system)) != 1:
            raise ValueError(f"stage {self.name!r}: set exactly one of `config` (a file), `run` (inline), `mine`, "
                             "`pairs` or `system`")
        if self.kind != "train" and (self.set or self.ewc or self.evaluations):
            raise ValueError(f"stage {self.name!r}: a {self.kind} stage trains nothing: remove set, ewc and evaluations")
        return self

    @property
    def kind(self) -> str:
        """'train', 'mine', 'pairs' or 'system'."""
        for kind in ("mine", "pairs", "system"):
            if getattr(self, kind) is not None:
                return kind
        return "train"


class StageReuseConfig(Section):
    """Reuse of stages across pipeline runs: a stage whose resolved config and inputs (by content) match a stage
    already run takes that stage's outputs instead of running again (lmplatform/pipeline/cache.py)."""

    enabled: bool = Field(False, description="Look stages up before running them, and record them after (a study's "
                          "pipeline trials turn it on).")
    path: Optional[str] = Field(None, description="The cache folder, shared by every pipeline that names it. "
                                "Default: <storage_path>/stage-cache.")


class PipelineConfig(Section):
    """A multi-stage training pipeline."""

    name: str = Field(..., pattern=_NAME)
    description: str = ""
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
        makes_files = {stage.name: stage.kind for stage in self.stages if stage.kind != "train"}
        for stage in self.stages:
            if stage.name in seen:
                raise ValueError(f"stage name {stage.name!r} is used twice")
            refs = [("init_from", stage.init_from), ("ewc.anchor", stage.ewc.anchor_reference if stage.ewc else None)]
            refs += [("evaluations.mlm_head_from", e.mlm_head_from) for e in stage.evaluations]
            for what, ref in refs:
                if ref and ref.startswith(STAGE_PREFIX) and ref[len(STAGE_PREFIX):] not in seen:
                    raise ValueError(f"stage {stage.name!r}: {what} names {ref[len(STAGE_PREFIX):]!r}, which is not an "
                                     f"earlier stage (earlier: {', '.join(seen) or 'none'})")
                if ref and ref.startswith(STAGE_PREFIX) and ref[len(STAGE_PREFIX):] in makes_files:
                    name = ref[len(STAGE_PREFIX):]
                    raise ValueError(f"stage {stage.name!r}: {what} names {makes_files[name]} stage {name!r}, which "
                                     "makes pairs files, not a model (use it in data.train_paths)")
            seen.append(stage.name)
        for task in self.tasks:
            if not task.task:
                raise ValueError(f"tasks: evaluation {task.key!r} needs a `task` name")
        return self

    def stage(self, name: str) -> StageConfig:
        return next(s for s in self.stages if s.name == name)


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


# A stage's own fields (`stages.<stage>.<field>...=v` sets them); any other first key is a run-config section.
STAGE_FIELDS = ("config", "run", "mine", "pairs", "system", "init_from", "ewc", "evaluations")


def _stage_override(stage: dict[str, Any], item: str) -> dict[str, Any]:
    """`stage` with one `<field path>=value` override: a stage field (run.optim.lr, mine.range_max, ewc.lambda,
    init_from) is set in place, except `run.*` on a stage whose run config is a file, which joins its `set` list as
    `*`; anything else (optim.lr) is a run-config override, added to `set`."""
    head = re.split(r"[.=]", item, maxsplit=1)[0]
    if head == "run" and "run" not in stage and "config" in stage:
        return {**stage, "set": [*stage.get("set", []), item[len("run."):]]}
    if head in STAGE_FIELDS:
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
    pipeline = parse_config(data, PipelineConfig, source=source)
    earlier_mines: list[str] = []
    earlier_trained: list[str] = []
    outputs: dict[str, list[str]] = {}  # earlier pairs stages -> the files they write
    for stage in pipeline.stages:
        section = getattr(stage, stage.kind) if stage.kind != "train" else None
        content = section.model_dump(mode="json") if section is not None else stage_run_data(pipeline, stage)
        _check_output_references(stage.name, content, outputs, source)
        if stage.pairs is not None:
            outputs[stage.name] = stage.pairs.outputs()
            continue
        if stage.system is not None:
            for field in ("retriever", "reranker"):
                value = getattr(stage.system, field) or ""
                name = value.removeprefix(STAGE_PREFIX)
                if value.startswith(STAGE_PREFIX) and name not in earlier_trained:
                    raise ConfigError(f"{source}: stage {stage.name!r}: system.{field} names stage:{name}, which is not "
                                      f"an earlier training stage "
                                      f"(earlier training stages: {', '.join(earlier_trained) or 'none'})")
            continue
        if stage.mine is not None:
            earlier_mines.append(stage.name)
            continue
        unknown = [n for n in stage_data_references(content) if n not in earlier_mines]
        if unknown:
            raise ConfigError(f"{source}: stage {stage.name!r}: data paths name stage:{unknown[0]}, which is not an "
                              f"earlier mine stage (earlier mine stages: {', '.join(earlier_mines) or 'none'})")
        for field, name in objective_model_references(content):
            if name not in earlier_trained:
                raise ConfigError(f"{source}: stage {stage.name!r}: {field} names stage:{name}, which is not an earlier "
                                  f"training stage (earlier training stages: {', '.join(earlier_trained) or 'none'})")
        earlier_trained.append(stage.name)
        # Placeholders for what is only known at run time (earlier stages' models).
        try:
            build_stage_config(pipeline, stage, "default", "runs", "check", ewc_anchor_model="default" if stage.ewc else None)
        except ConfigError as exc:
            raise ConfigError(f"{source}: stage {stage.name!r}: {exc}") from None
    return pipeline


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
