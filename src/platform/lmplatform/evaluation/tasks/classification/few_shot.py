"""Few-shot learning curves: every classifier trained on k examples per class, over several seeded samples.

The sample of a seed is drawn once and shared by all classifiers, so the curves differ by classifier, not
by sample. Test rows are the task's test split, as for the full-data rows; nothing is chosen on them.
"""
from __future__ import annotations

import random
import statistics
from typing import Any, Callable, Literal, Sequence, Union

from lmplatform.markdown import markdown_table

Shots = Union[int, Literal["all"]]
CURVE_METRICS = ("accuracy", "f1_macro", "roc_auc")


def sample_per_class(labels: Sequence[str], shots: Shots, seed: int) -> list[int]:
    """Indices (ascending) of `shots` examples of each class, all of a class that has fewer; every index for 'all'."""
    if shots == "all":
        return list(range(len(labels)))
    rng = random.Random(seed)
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(str(label), []).append(i)
    chosen: list[int] = []
    for label in sorted(by_class):  # a fixed class order: the same seed draws the same sample
        members = by_class[label]
        chosen += members if len(members) <= shots else rng.sample(members, shots)
    return sorted(chosen)


# (classifier key, its training rows, seed) -> test metrics
Scorer = Callable[[list[int], int], dict[str, float]]


def few_shot_points(scorers: dict[str, Scorer], train_labels: Sequence[str], shots: Sequence[Shots],
                    seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One point per classifier x shots x seed: {"classifier", "shots", "seed", "train", metrics...}."""
    points = []
    for n in shots:
        for seed in seeds:
            rows = sample_per_class(train_labels, n, seed)
            for key, score in scorers.items():
                metrics = score(rows, seed)
                points.append({"classifier": key, "shots": n, "seed": seed, "train": len(rows),
                               **{m: metrics[m] for m in CURVE_METRICS}})
    return points


def summarize_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds per classifier x shots (std 0 for a single seed)."""
    out = []
    for key in dict.fromkeys((p["classifier"], p["shots"]) for p in points):
        group = [p for p in points if (p["classifier"], p["shots"]) == key]
        row: dict[str, Any] = {"classifier": key[0], "shots": key[1], "seeds": len(group),
                               "train_mean": statistics.fmean(p["train"] for p in group)}
        for metric in CURVE_METRICS:
            values = [p[metric] for p in group]
            row[f"{metric}_mean"] = statistics.fmean(values)
            row[f"{metric}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
        out.append(row)
    return out


def few_shot_table(summary: list[dict[str, Any]], settings: dict[str, str]) -> str:
    """A line per classifier x shots: training size and mean ± std of each curve metric."""
    header = ["classifier", "per class", "train (mean)", "seeds", *CURVE_METRICS]
    rows = [[settings.get(r["classifier"], r["classifier"]), str(r["shots"]), f"{r['train_mean']:.0f}", str(r["seeds"]),
             *(f"{r[f'{m}_mean']:.4f} ± {r[f'{m}_std']:.4f}" for m in CURVE_METRICS)] for r in summary]
    return markdown_table(header, rows)
