"""The sections of a run configuration, one pydantic model per YAML section.

`RunConfig`, which puts them together with the objective's section (one of the registered objectives'
configs), is assembled above the objectives, in `lmplatform.objectives.run_config`.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from lmplatform.config.base import Section

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
    query_field: str = Field(
        "query", min_length=1, description="Pair objectives (biencoder, cross_encoder): column of the query / observation."
    )
    document_field: str = Field(
        "document", min_length=1, description="Pair objectives: column of the matching document / answer."
    )
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
    storage_path: str = Field(
        "runs", description="Ray Train storage (local folder, NFS path or s3://...). "
        "Relative paths are under the project folder."
    )
    max_failures: int = Field(
        2, ge=-1, description="Worker failures to recover from (from the latest checkpoint); -1 is unlimited."
    )


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
    eval_every_n_steps: Optional[int] = Field(
        None, ge=1, description="Validation during training; always run at the end, and at the start unless "
        "validate_at_start is false."
    )
    validate_at_start: bool = Field(
        True, description="Validate before the first step (the `_initial` metrics). Early stopping validates there "
        "regardless: it is its first best. A study's pipeline trials turn it off (tune/pipeline_trial.py): the "
        "study reads only validations after training starts, and each would repeat its start model's.")
    exports: list[str] = Field(
        default_factory=list, description="Also log the final model in these formats beside model/ (model-onnx/, ...; "
        "see `lmp export`): sentence-transformers, onnx, onnx-int8, openvino, or one registered from outside the "
        "package; not one that needs calibration texts (openvino-int8). A cross-encoder exports as "
        "sentence-transformers only.")


class EWCConfig(Section):
    """Elastic weight consolidation: penalise moving away from an earlier model (docs/ewc_pipelines.md)."""

    # `lambda` is a Python keyword: the field is `lambda_`, written `lambda` in YAML and --set
    # (merged with Section's config).
    model_config = ConfigDict(populate_by_name=True)

    fisher_path: Optional[str] = Field(
        None, description="A saved Fisher diagonal: a local .safetensors file, "
        "or an MLflow URI (runs:/<id>/ewc/fisher.safetensors)."
    )
    fisher_from: Optional[DataConfig] = Field(
        None, description="Compute the Fisher diagonal before training from this data (the previous stage's data)."
    )
    anchor_model: Optional[str] = Field(
        None, description="theta*, the model to stay close to and where the Fisher is computed. Default: model.name_or_path."
    )
    lambda_: float = Field(
        ..., gt=0.0, alias="lambda", description="Penalty strength; the trouble-report study swept 1e4, 1e6, 1e7."
    )
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
