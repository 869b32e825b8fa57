"""Which metrics a trial reports to Tune, and what each one depends on.

A study may only target a metric its trials report; otherwise Tune would fail every trial after minutes of
training. A training trial reports what `objectives.run_config.reported_metrics` lists (each objective's spec names
its validation metrics and the settings that define them); a pipeline trial, every stage's metrics as its kind
names them (`pipeline/spec.py`).
"""
from __future__ import annotations

from typing import Any

from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import RunConfig

CORPUS_METRIC_PREFIX = "val_ir_"


def pipeline_reported_metrics(pipeline: Any) -> set[str]:
    """What a pipeline trial reports: each stage's metrics as `<stage>/<metric>` (its kind's `metric_names`)."""
    return {f"{stage.name}/{metric}" for stage in pipeline.stages
            for metric in stage.spec.module().metric_names(pipeline, stage)}


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
