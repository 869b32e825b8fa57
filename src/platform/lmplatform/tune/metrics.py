"""Which metrics a training trial of each objective reports to Tune.

A study may only target a metric its trials report; otherwise Tune would fail
every trial after minutes of training. Objectives that land later add their
names here (one line each). The generic loop adds `loss`, `step`, `epoch`,
`tokens` and, for every validation metric, its `_initial` value.
"""
from __future__ import annotations

LOOP_METRICS = ("loss", "step", "epoch", "tokens")

VALIDATION_METRICS: dict[str, tuple[str, ...]] = {
    "mlm": ("mlm_loss", "mlm_accuracy", "perplexity", "pseudo_perplexity"),
    "declutr": ("contrastive_loss", "contrastive_accuracy", "mlm_loss", "mlm_accuracy", "perplexity"),
    "biencoder": ("ranking_loss", "retrieval_accuracy", "retrieval_mrr", "retrieval_candidates"),
    "cross_encoder": ("bce_loss", "accuracy", "pairwise_accuracy", "mrr"),
    "graph_cl": tuple(f"{variant}_{m}" for variant in ("clgs", "cldr", "clner") for m in ("loss", "accuracy")),
    "sts": ("spearman", "pearson"),
    "classifier": ("loss", "accuracy"),
}


def reported_metrics(objective: str) -> set[str]:
    validation = VALIDATION_METRICS.get(objective, ())
    names = {f"val_{m}" for m in validation} | {f"val_{m}_initial" for m in validation}
    return names | set(LOOP_METRICS)


# Objective settings that change what a validation score means (e.g. how many
# tokens MLM masks). Models are only compared when these match.
EVALUATION_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "mlm": ("mask_probability", "replace_with_mask", "replace_with_random", "whole_word", "pseudo_perplexity_sentences"),
}


def evaluation_config_keys(objective: str) -> tuple[str, ...]:
    return EVALUATION_CONFIG_KEYS.get(objective, ())
