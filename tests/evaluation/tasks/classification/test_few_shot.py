"""The few-shot sampler and the curve's summary."""
from __future__ import annotations

from collections import Counter

import pytest

from lmplatform.evaluation.tasks.classification.few_shot import sample_per_class, summarize_points

LABELS = ["a"] * 20 + ["b"] * 12 + ["c"] * 3


def test_sampler_takes_exactly_k_per_class_or_all_of_a_smaller_class() -> None:
    rows = sample_per_class(LABELS, 8, seed=1)
    assert Counter(LABELS[i] for i in rows) == {"a": 8, "b": 8, "c": 3}
    assert rows == sorted(set(rows))
    assert sample_per_class(LABELS, "all", seed=1) == list(range(len(LABELS)))
    assert Counter(LABELS[i] for i in sample_per_class(LABELS, 40, seed=1)) == {"a": 20, "b": 12, "c": 3}


def test_sampler_is_seed_deterministic() -> None:
    assert sample_per_class(LABELS, 4, seed=7) == sample_per_class(LABELS, 4, seed=7)
    assert len({tuple(sample_per_class(LABELS, 4, seed=s)) for s in range(5)}) > 1
    # the sample depends on the labels, not on their order of first appearance
    shuffled = LABELS[20:] + LABELS[:20]
    picked = sorted(shuffled[i] + str(i) for i in sample_per_class(shuffled, 4, seed=7))
    assert Counter(p[0] for p in picked) == {"a": 4, "b": 4, "c": 3}


def test_summary_is_mean_and_std_over_seeds() -> None:
    points = [{"classifier": "mlp", "shots": 8, "seed": s, "train": 24, "accuracy": acc, "f1_macro": acc, "roc_auc": 1.0}
              for s, acc in ((1, 0.5), (2, 0.7))]
    (row,) = summarize_points(points)
    assert row["accuracy_mean"] == pytest.approx(0.6) and row["accuracy_std"] == pytest.approx(0.1414, abs=1e-4)
    assert row["roc_auc_std"] == 0.0 and row["seeds"] == 2
