"""The run configuration, one pydantic model per YAML section.

`lmp config schema` prints the JSON schema of `RunConfig`; docs/config-reference.md
is generated from it (`make docs`).
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import ConfigDict, Field, field_validator, model_validator

from lmplatform.config.base import Section
from lmplatform.objectives.mlm.config import MLMObjectiveConfig
from lmplatform.objectives.registry import objective_specs
from lmplatform.retrieval.settings import FusionSettings

PACKAGED_MODEL = "default"


class ModelConfig(Section):
    """Which encoder to start from and how to pool it."""

    name_or_path: str = Field(
        PACKAGED_MODEL,
        description="'default' (the packaged all-MiniLM-L6-v2), a local Hugging Face folder, "
        "a model id already in the local Hugging Face cache, or models:/<name>@<alias> from MLflow.",
    )
    pooling: Literal["mean", "cls", "max"] = Field("mean", description="How token vectors become one text vector.")
    max_seq_length: int = Field(128, ge=8, le=8192, description="Longer texts are truncated.")
    gradient_checkpointing: bool = Field(
        False, description="Recompute the transformer's activations during backward instead of keeping them "
        "(Hugging Face activation checkpointing, non-reentrant): much less memory for about a third more compute.")


class LengthGroupingConfig(Section):
    """Batches of rows of similar length, so that dynamic padding pads less."""

    buffer_batches: int = Field(
        64, ge=2, description="Rows of this many batches are read at a time, sorted by length (characters of their "
        "texts) and cut into batches; the batches' order is then shuffled (seeded by optim.seed, the epoch and the rank). "
        "Larger buffers pad less and mix lengths within an epoch less.")


class DataConfig(Section):
    """Where the training text comes from and how it is cleaned and split."""

    train_paths: list[str] = Field(..., min_length=1, description="Files or folders (every file inside is read).")
    validation_paths: list[str] = Field(
        default_factory=list, description="Explicit validation files. When empty, validation is split off train."
    )
    format: Literal["auto", "jsonl", "csv", "parquet", "text"] = Field(
        "auto", description="'auto' picks by extension: .jsonl/.json, .csv/.tsv, .parquet, anything else is text."
    )
    text_field: str = Field("text", min_length=1, description="Column holding the document text (not used for text files).")
    text_fields: Optional[list[str]] = Field(
        None, min_length=1, description="Corpus objectives (mlm, declutr): several columns, each a document of its own, "
        "in place of text_field; a row gives one document per listed column it has (e.g. [sentence, sentence1, sentence2] "
        "reads GLUE files and both sentences of STS pair files together); a row with none of them is a bad row.")
    validation_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="Share of documents held out by a stable hash.")
    seed: int = Field(13, description="Seeds the train/validation hash split.")
    clean: bool = Field(True, description="Strip carriage returns, tabs, repeated spaces and badly encoded characters.")
    dedup: bool = Field(False, description="Drop exact duplicate documents (after cleaning).")
    min_chars: int = Field(1, ge=1, description="Documents shorter than this after cleaning are bad rows.")
    on_bad_row: Literal["skip", "fail"] = Field(
        "skip", description="'skip' counts and reports bad rows; 'fail' stops at the first one with its file and line."
    )
    max_documents: Optional[int] = Field(None, ge=1, description="Read at most this many documents (demos, smoke runs).")
    query_field: str = Field("query", min_length=1, description="Pair objectives (biencoder, cross_encoder): column of the query / observation.")
    document_field: str = Field("document", min_length=1, description="Pair objectives: column of the matching document / answer.")
    hard_negative_field: Optional[str] = Field(
        None, description="Pair objectives: optional column of hard negatives (a list of texts, or one text)."
    )
    group_field: Optional[str] = Field(
        None, description="Pair objectives: optional column of the pair's duplicate-group id (a text or an integer); "
        "a row without one is a bad row. Used by objective.group_aware_batches and the mine stage; without it, "
        "groups are the pairs' duplicate links (a text and its partner, through any chain of pairs).")
    length_grouping: Optional[LengthGroupingConfig] = Field(
        None, description="Group the training rows by length within a shuffle buffer, e.g. {buffer_batches: 64}; "
        "every row still comes once per epoch. With objective.group_aware_batches, the driver's plan sorts its draw "
        "the same way, so batches stay free of group conflicts.")
    prefetch: Optional[bool] = Field(
        None, description="Collate (tokenize) the next training batch and copy it to the device (pinned memory, "
        "non-blocking) in a background thread while the current step runs. Default: on with a GPU, off on CPU, "
        "where the thread competes with the step for the same cores.")

    @field_validator("train_paths", "validation_paths", mode="before")
    @classmethod
    def _one_path_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def objective_configs() -> tuple[type[Section], ...]:
    """The config class of every registered objective, in registry order (the union's)."""
    return tuple(spec.config for spec in objective_specs())


# One of the registered objectives' configs, chosen by `name`; derived from the registry.
ObjectiveConfig = Annotated[Union[objective_configs()], Field(discriminator="name")]


class EarlyStoppingConfig(Section):
    """Stop before the step budget once a validation metric has stopped improving. It is read at every
    validation (tracking.eval_every_n_steps)."""

    metric: str = Field(..., min_length=1, pattern=r"^val_\w+$",
                        description="A validation metric the run reports, e.g. val_mlm_loss or val_ir_mrr_at_10.")
    mode: Literal["min", "max"] = Field("min", description="min for losses, max for accuracies and retrieval metrics.")
    patience: int = Field(3, ge=1, description="Validations in a row without an improvement before the run stops.")
    min_delta: float = Field(0.0, ge=0.0, description="Smallest change from the best value so far that counts as an improvement.")
    keep: Literal["last", "best"] = Field(
        "last", description="The model the run ends with: the last step's, or the weights of the best validation "
        "(held in memory and in every checkpoint, restored before the final validation and export).")


class OptimConfig(Section):
    """AdamW with a linear warm-up/decay schedule."""

    optimizer: Literal["adamw"] = "adamw"
    lr: float = Field(5e-5, gt=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0)
    adam_eps: float = Field(1e-8, gt=0.0)
    batch_size: int = Field(16, ge=1, description="Per worker. The global batch is batch_size x num_workers x grad_accum_steps.")
    grad_accum_steps: int = Field(1, ge=1)
    scheduler: Literal["linear", "constant"] = "linear"
    warmup_ratio: float = Field(0.06, ge=0.0, lt=1.0, description="Used when warmup_steps is not set.")
    warmup_steps: Optional[int] = Field(None, ge=0)
    epochs: Optional[float] = Field(1.0, gt=0.0)
    max_steps: Optional[int] = Field(None, ge=1, description="Optimizer steps; overrides epochs when set.")
    max_grad_norm: Optional[float] = Field(1.0, gt=0.0)
    precision: Literal["fp32", "bf16", "fp16", "auto"] = Field(
        "fp32", description="Forward passes and losses under torch.autocast in this type; weights, gradients and "
        "optimizer state stay fp32. 'bf16' runs on CPU and GPU; 'fp16' needs a GPU (scaling.use_gpu) and scales "
        "the loss dynamically (torch.amp.GradScaler); 'auto' takes bf16 where the worker's device has it in "
        "hardware (Ampere+ GPUs, CPUs with AVX512-BF16 or AMX), else fp16 on a GPU and fp32 on a CPU.")
    seed: int = 42
    early_stopping: Optional[EarlyStoppingConfig] = Field(
        None, description="Stop when a validation metric plateaus (needs tracking.eval_every_n_steps); the step "
        "budget (max_steps or epochs) stays the upper bound and sets the schedule. With keep: best, a run that "
        "reaches its budget also ends with its best validation's weights.")

    @model_validator(mode="after")
    def _needs_a_length(self) -> "OptimConfig":
        if self.max_steps is None and self.epochs is None:
            raise ValueError("set optim.max_steps or optim.epochs")
        return self


class ScalingConfig(Section):
    """How many Ray Train workers, and what each one reserves."""

    num_workers: int = Field(1, ge=1)
    use_gpu: bool = False
    cpus_per_worker: float = Field(1.0, gt=0.0)
    gpus_per_worker: float = Field(1.0, gt=0.0, description="Used only when use_gpu is true.")
    resources_per_worker: dict[str, float] = Field(
        default_factory=dict, description="Extra custom resources per worker, e.g. a node label {'trainer': 1}."
    )
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    torch_threads: Optional[int] = Field(
        None, ge=1, description="Intra-op threads per worker; defaults to cpus_per_worker rounded up."
    )


class CheckpointConfig(Section):
    every_n_steps: int = Field(200, ge=1)
    keep: int = Field(2, ge=1, description="Checkpoints kept on storage (the newest ones).")
    storage_path: str = Field("runs", description="Ray Train storage (local folder, NFS path or s3://...). Relative paths are under the project folder.")
    max_failures: int = Field(2, ge=-1, description="Worker failures to recover from (from the latest checkpoint); -1 is unlimited.")


class TrackingConfig(Section):
    tracking_uri: Optional[str] = Field(
        None, description="MLflow tracking URI. Default: $MLFLOW_TRACKING_URI, else sqlite under <project>/mlruns."
    )
    experiment: str = Field("lmplatform", min_length=1)
    run_name: Optional[str] = None
    registered_model: Optional[str] = Field(
        None, description="Registered model name. Default: lmplatform-<objective>."
    )
    register_model: bool = Field(True, description="Register the final model as a new version.")
    log_every_n_steps: int = Field(10, ge=1)
    eval_every_n_steps: Optional[int] = Field(None, ge=1, description="Validation during training; always run at the start and end.")
    exports: list[Literal["sentence-transformers", "onnx", "onnx-int8"]] = Field(
        default_factory=list, description="Also log the final model in these formats beside model/ (model-onnx/, ...; "
        "see `lmp export`). A cross-encoder exports as sentence-transformers only.")


class EWCConfig(Section):
    """Elastic weight consolidation: penalise moving away from an earlier model (docs/ewc_pipelines.md)."""

    # `lambda` is a Python keyword: the field is `lambda_`, written `lambda` in YAML and --set
    # (merged with Section's config).
    model_config = ConfigDict(populate_by_name=True)

    fisher_path: Optional[str] = Field(
        None, description="A saved Fisher diagonal: a local .safetensors file, or an MLflow URI (runs:/<id>/ewc/fisher.safetensors)."
    )
    fisher_from: Optional[DataConfig] = Field(
        None, description="Compute the Fisher diagonal before training from this data (the previous stage's data)."
    )
    anchor_model: Optional[str] = Field(
        None, description="theta*, the model to stay close to and where the Fisher is computed. Default: model.name_or_path."
    )
    lambda_: float = Field(..., gt=0.0, alias="lambda", description="Penalty strength; the trouble-report study swept 1e4, 1e6, 1e7.")
    samples: int = Field(7000, ge=1, description="Examples of fisher_from used for the Fisher diagonal.")
    loss: Literal["mlm"] = Field("mlm", description="The loss whose squared gradients make the Fisher diagonal.")
    batch_size: int = Field(
        1, ge=1, description="Examples per gradient when computing the Fisher; 1 is the exact empirical Fisher, larger is faster."
    )
    seed: int = Field(1234, description="Seeds the masks and the sample of fisher_from.")

    @model_validator(mode="after")
    def _one_fisher_source(self) -> "EWCConfig":
        if (self.fisher_path is None) == (self.fisher_from is None):
            raise ValueError("set exactly one of ewc.fisher_path (a saved Fisher) or ewc.fisher_from (data to compute it from)")
        return self


RETRIEVAL_VALIDATED_OBJECTIVES = ("biencoder", "biencoder_distill", "cross_encoder", "declutr")


class DistractorConfig(Section):
    """Extra candidates for corpus-level validation: every text of these files (a sample of them when
    `max_documents` is set) joins the pool each validation query is ranked against."""

    paths: list[str] = Field(..., min_length=1, description="JSONL/CSV/Parquet/text files (or folders) of documents.")
    fields: list[str] = Field(["text"], min_length=1, description="Fields joined with '. ' into one document text (jsonl/csv/parquet).")
    max_documents: Optional[int] = Field(None, ge=1, description="A seeded random sample of this many documents.")
    seed: int = Field(13, description="Seeds the sample.")

    @field_validator("paths", mode="before")
    @classmethod
    def _one_path_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def hybrid_metric_name(name: str) -> str:
    """ir_mrr_at_10 -> ir_hybrid_mrr_at_10: the metric of the BM25-fused ranking (`RetrievalValidationConfig.hybrid`)."""
    return "ir_hybrid_" + name.removeprefix("ir_")


class RetrievalValidationConfig(Section):
    """Corpus-level retrieval validation (docs/tuning.md#selection-metrics): each validation query is ranked
    against the whole candidate pool (validation documents plus distractors) and scored with Recall@k,
    MRR@k, nDCG@k and MAP@k. Ties count against the query. Logged as `val_ir_*`."""

    pairs: Optional[DataConfig] = Field(
        None, description="Where the validation pairs come from; the run's own `data` when empty (pair objectives). "
        "DeCLUTR needs it. Its split rule (validation_paths, or validation_fraction and seed) picks the queries.")
    split: Literal["validation", "all"] = Field(
        "validation", description="'validation': the validation side of `pairs`; 'all': every pair (a file kept apart for this).")
    relevance: Literal["group", "pair"] = Field(
        "group", description="'group': every other text of the query's duplicate group (linked through any pair, "
        "train or validation) is relevant; 'pair': only the query's own documents.")
    distractors: Optional[DistractorConfig] = Field(None, description="Documents added to the candidate pool.")
    max_queries: Optional[int] = Field(None, ge=1, description="A stable hash sample of this many queries.")
    recall_ks: list[int] = Field([1, 10, 20], min_length=1, description="Cut-offs of val_ir_recall_at_<k>.")
    mrr_k: int = Field(10, ge=1, description="Cut-off of val_ir_mrr_at_<k>.")
    ndcg_k: int = Field(10, ge=1, description="Cut-off of val_ir_ndcg_at_<k>.")
    map_k: int = Field(100, ge=1, description="Cut-off of val_ir_map_at_<k> (average precision over the top k).")
    batch_size: int = Field(64, ge=1, description="Texts (or cross-encoder pairs) per forward pass.")
    first_stage: str = Field(
        "bm25", description="cross_encoder only: the retriever whose top `candidates` are re-ranked: 'bm25', or a "
        "bi-encoder ('default', a folder, models:/name@alias).")
    candidates: int = Field(20, ge=1, description="cross_encoder only: depth N of the first stage that is re-ranked.")
    hybrid: Optional[FusionSettings] = Field(
        None, description="Bi-encoders only: also rank every query by BM25 fused with the model (retrieval.fusion) "
        "and report those metrics as val_ir_hybrid_*, e.g. {bm25_weight: 0.2, fusion: convex}.")

    @field_validator("recall_ks")
    @classmethod
    def _positive_ks(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError(f"every k must be >= 1, got {value}")
        return sorted(set(value))

    def depth(self) -> int:
        """How many candidates a ranking must hold for every metric."""
        return max(*self.recall_ks, self.mrr_k, self.ndcg_k, self.map_k)

    def ranking_metric_names(self) -> tuple[str, ...]:
        """The `ir_*` metrics of one ranking of every query (`score_rankings`)."""
        return (*(f"ir_recall_at_{k}" for k in self.recall_ks), f"ir_mrr_at_{self.mrr_k}",
                f"ir_ndcg_at_{self.ndcg_k}", f"ir_map_at_{self.map_k}")

    def per_query_metric_names(self) -> tuple[str, ...]:
        """The `ir_*` metrics scored query by query (the gate can compare models on any of them), with the
        `ir_hybrid_*` twins of the fused ranking when `hybrid` is set."""
        names = self.ranking_metric_names()
        return (*names, *(hybrid_metric_name(n) for n in names)) if self.hybrid is not None else names

    def metric_names(self) -> tuple[str, ...]:
        """Every `ir_*` metric name (without the `val_` prefix) a validation reports: the per-query ones and the set's size."""
        return (*self.per_query_metric_names(), "ir_queries", "ir_candidates")


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
        None, description="Corpus-level retrieval metrics (val_ir_*) at every validation: biencoder, biencoder_distill, cross_encoder, declutr.")

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
        if name not in RETRIEVAL_VALIDATED_OBJECTIVES:
            raise ValueError(f"retrieval_validation applies to objectives {', '.join(RETRIEVAL_VALIDATED_OBJECTIVES)}, "
                             f"not {name!r}; remove the section")
        if name == "declutr" and rv.pairs is None:
            raise ValueError("retrieval_validation.pairs is required for declutr (its training data has no pairs): "
                             "name a pair file, e.g. {train_paths: [data/demo/pairs.jsonl], validation_fraction: 0.2}")
        # compared with the defaults, not `model_fields_set`: a config dumped and validated again (as workers
        # receive it) has every field set
        defaults = RetrievalValidationConfig.model_fields
        if name != "cross_encoder" and (rv.first_stage, rv.candidates) != (defaults["first_stage"].default, defaults["candidates"].default):
            raise ValueError("retrieval_validation.first_stage and .candidates apply to cross_encoder only")
        if name == "cross_encoder" and rv.hybrid is not None:
            raise ValueError("retrieval_validation.hybrid fuses BM25 with a bi-encoder; a cross_encoder re-ranks "
                             "retrieval_validation.first_stage instead: remove hybrid")
        return self

    @model_validator(mode="after")
    def _early_stopping_has_validations(self) -> "RunConfig":
        if self.optim.early_stopping is not None and self.tracking.eval_every_n_steps is None:
            raise ValueError("optim.early_stopping reads the validations during training: set tracking.eval_every_n_steps")
        return self

    @model_validator(mode="after")
    def _distillation_has_hard_negatives(self) -> "RunConfig":
        if self.objective.name == "biencoder_distill" and self.data.hard_negative_field is None:
            raise ValueError("objective biencoder_distill needs data.hard_negative_field: the column of each pair's hard "
                             "negatives the teacher scores (a mine stage writes it as `hard_negatives`)")
        return self

    @model_validator(mode="after")
    def _precision_fits_device(self) -> "RunConfig":
        if self.optim.precision == "fp16" and not self.scaling.use_gpu:
            raise ValueError("optim.precision 'fp16' needs a GPU (scaling.use_gpu: true); "
                             "on CPU use optim.precision 'bf16' or 'fp32'")
        return self

    @model_validator(mode="after")
    def _exports_fit(self) -> "RunConfig":
        graphs = [f for f in self.tracking.exports if f != "sentence-transformers"]
        if self.objective.name == "cross_encoder" and graphs:
            raise ValueError(f"tracking.exports {graphs}: a cross-encoder exports as sentence-transformers only "
                             "(the ONNX graph ends in a sentence embedding)")
        return self

    def registered_model_name(self) -> str:
        return self.tracking.registered_model or f"lmplatform-{self.objective.name}"


def rebuild_objective_union() -> None:
    """Make `RunConfig.objective` accept exactly the registered objectives again (after `registry.register`)."""
    RunConfig.model_fields["objective"].annotation = Union[objective_configs()]  # the discriminator stays on the field
    RunConfig.model_rebuild(force=True)
