"""`prepared_pairs`: a pair objective's data as the driver hands it to the trainer (biencoder and its group-aware
plan, biencoder_distill, cross_encoder)."""
from __future__ import annotations

from lmplatform.data.pairs import PairSet
from lmplatform.train.recipe import PreparedData


def prepared_pairs(pairs: PairSet, datasets: dict, examples: int, extra_metrics: dict[str, float] | None = None,
                   extra_summary: str = "") -> PreparedData:
    """The `PreparedData` of pair data: its datasets, row counts, report and fingerprint."""
    report = pairs.report
    return PreparedData(
        datasets=datasets,
        train_examples=examples,
        metrics=report.metrics()
        | {"data/train_pairs": float(len(pairs.train)), "data/validation_pairs": float(len(pairs.validation))}
        | (extra_metrics or {}),
        summary=report.summary().replace("documents", "pairs", 1) + extra_summary,
        fingerprint=report.fingerprint,
        report=report.__dict__ | {"bad_total": report.bad_total},
    )
