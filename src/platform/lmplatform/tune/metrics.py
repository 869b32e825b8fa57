"""Which metrics a training trial of each objective reports to Tune, and what each one depends on.

A study may only target a metric its trials report; otherwise Tune would fail
every trial after minutes of training. The generic loop adds `loss`, `step`,
`epoch`, `tokens` and, for every validation metric, its `_initial` value. A run
with `retrieval_validation` also reports the corpus-level `val_ir_*` metrics.
"""
from __future__ import annotations

from lmplatform.config.schema import RunConfig

LOOP_METRICS = ("loss", "step", "epoch", "tokens")
CORPUS_METRIC_PREFIX = "val_ir_"

VALIDATION_METRICS: dict[str, tuple[str, ...]] = {
    "mlm": ("mlm_loss", "mlm_accuracy", "perplexity", "pseudo_perplexity"),
    "declutr": ("contrastive_loss", "inbatch_accuracy", "mlm_loss", "mlm_accuracy", "perplexity"),
    "biencoder": ("ranking_loss", "inbatch_accuracy", "inbatch_mrr", "inbatch_candidates"),
    "cross_encoder": ("bce_loss", "accuracy", "inbatch_pairwise_accuracy", "inbatch_mrr"),
    "graph_cl": tuple(f"{variant}_{m}" for variant in ("clgs", "cldr", "clner") for m in ("loss", "accuracy")),
    "sts": ("spearman", "pearson"),
    "classifier": ("loss", "accuracy"),
}


def validation_metrics(cfg: RunConfig) -> tuple[str, ...]:
    """Validation metric names (without `val_`) a run of this config reports."""
    names = VALIDATION_METRICS.get(cfg.objective.name, ())
    if cfg.retrieval_validation is not None:
        names = (*names, *cfg.retrieval_validation.metric_names())
    return names


def reported_metrics(cfg: RunConfig) -> set[str]:
    validation = validation_metrics(cfg)
    names = {f"val_{m}" for m in validation} | {f"val_{m}_initial" for m in validation}
    return names | set(LOOP_METRICS)


def is_corpus_metric(metric: str) -> bool:
    """A corpus-level retrieval metric (ranked against the whole pool), as opposed to an in-batch one."""
    return metric.startswith(CORPUS_METRIC_PREFIX)


# Settings that change what a validation score means. Two models' scores are only compared when these
# match. In-batch numbers depend on the batch, so the batch size is one of them.
_VALIDATION_DATA_KEYS = (
    "data.format", "data.text_field", "data.query_field", "data.document_field", "data.hard_negative_field",
    "data.validation_paths", "data.validation_fraction", "data.seed", "data.clean", "data.dedup", "data.min_chars",
    "data.max_documents", "model.max_seq_length",
)
EVALUATION_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "mlm": ("objective.mask_probability", "objective.replace_with_mask", "objective.replace_with_random",
            "objective.whole_word", "objective.pseudo_perplexity_sentences"),
    "declutr": ("objective.num_anchors", "objective.num_positives", "objective.min_span", "objective.max_span",
                "objective.mask_probability", "objective.replace_with_mask", "objective.replace_with_random",
                "optim.batch_size"),
    "biencoder": ("objective.max_hard_negatives", "optim.batch_size"),
    "cross_encoder": ("objective.negatives_per_positive", "objective.negatives", "objective.miner_model",
                      "objective.mining_top_k", "objective.use_hard_negatives", "objective.seed"),
    "graph_cl": ("objective.variant", "objective.negatives_per_sentence", "objective.samples_per_tag",
                 "objective.in_batch_negatives", "objective.folds_file", "objective.fold", "optim.batch_size"),
    "sts": ("objective.sentence1_field", "objective.sentence2_field", "objective.score_field", "objective.scale",
            "objective.split_field"),
    "classifier": ("objective.label_field", "objective.split_field", "objective.labels"),
}


def evaluation_config_keys(cfg: RunConfig, metric: str) -> tuple[str, ...]:
    """Flattened config keys whose values define what `metric` measures for this run."""
    if is_corpus_metric(metric):
        # Ranked against a fixed pool: only the set (fingerprinted separately) and how it was built matter.
        return ("retrieval_validation", "model.max_seq_length")
    return (*_VALIDATION_DATA_KEYS, *EVALUATION_CONFIG_KEYS.get(cfg.objective.name, ()))
