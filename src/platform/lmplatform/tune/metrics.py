"""Which metrics a training trial of each objective reports to Tune, and what each one depends on.

A study may only target a metric its trials report; otherwise Tune would fail
every trial after minutes of training. Each objective's spec names its validation
metrics and the settings that define them (`lmplatform.objectives.registry`). The
generic loop adds `loss`, `step`, `epoch`, `tokens` and, for every validation metric,
its `_initial` value (unless the run skips the validation at its start). A run with
`retrieval_validation` also reports the corpus-level `val_ir_*` metrics.
"""
from __future__ import annotations

from typing import Any

from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.pipeline.config import build_stage_config
from lmplatform.pipeline.system import system_metric_names

LOOP_METRICS = ("loss", "step", "epoch", "tokens")
CORPUS_METRIC_PREFIX = "val_ir_"


def validation_metrics(cfg: RunConfig) -> tuple[str, ...]:
    """Validation metric names (without `val_`) a run of this config reports."""
    names = objective_spec(cfg.objective.name).validation_metrics
    if cfg.retrieval_validation is not None:
        names = (*names, *cfg.retrieval_validation.metric_names())
    return names


def reported_metrics(cfg: RunConfig) -> set[str]:
    validation = validation_metrics(cfg)
    names = {f"val_{m}" for m in validation}
    if cfg.validates_at_start():
        names |= {f"val_{m}_initial" for m in validation}
    return names | set(LOOP_METRICS)


def pipeline_reported_metrics(pipeline: Any) -> set[str]:
    """What a pipeline trial reports: each training and system stage's metrics as `<stage>/<metric>`."""
    names: set[str] = set()
    for stage in pipeline.stages:
        if stage.system is not None:
            names |= {f"{stage.name}/{metric}" for metric in system_metric_names(stage.system)}
        if stage.kind == "train":
            cfg = build_stage_config(pipeline, stage, "default", "runs", "check",
                                     ewc_anchor_model="default" if stage.ewc else None)
            # as a trial runs it: without the validation of its start model (tune/pipeline_trial.py)
            cfg = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"validate_at_start": False})})
            names |= {f"{stage.name}/{metric}" for metric in reported_metrics(cfg)}
    return names


def is_corpus_metric(metric: str) -> bool:
    """A corpus-level retrieval metric (ranked against the whole pool), as opposed to an in-batch one; a pipeline
    trial's `<stage>/<metric>` by its metric."""
    return metric.rsplit("/", 1)[-1].startswith(CORPUS_METRIC_PREFIX)


# Settings that change what a validation score means. Two models' scores are only compared when these
# match. In-batch numbers depend on the batch, so the batch size is one of them. These are the data's;
# each objective's spec adds its own (`ObjectiveSpec.evaluation_keys`).
_VALIDATION_DATA_KEYS = (
    "data.format", "data.text_field", "data.query_field", "data.document_field", "data.hard_negative_field",
    "data.validation_paths", "data.validation_fraction", "data.seed", "data.clean", "data.dedup", "data.min_chars",
    "data.max_documents", "model.max_seq_length",
)


def evaluation_config_keys(cfg: RunConfig, metric: str) -> tuple[str, ...]:
    """Flattened config keys whose values define what `metric` measures for this run."""
    if is_corpus_metric(metric):
        # Ranked against a fixed pool: only the set (fingerprinted separately) and how it was built matter.
        return ("retrieval_validation", "model.max_seq_length")
    return (*_VALIDATION_DATA_KEYS, *objective_spec(cfg.objective.name).evaluation_keys)
