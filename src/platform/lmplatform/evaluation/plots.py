"""The evaluation report's figures, written as PNG files: confusion matrices, recall@K curves, STS scatters.

Figures are drawn with matplotlib's Agg backend: evaluations run on servers and Ray workers, where
no display is there for an interactive backend.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lmplatform.data.sts_pairs import STSPairs


def artifact_name(*parts: str) -> str:
    """A file-name-safe join of user-given labels (dataset, encoder names may hold '/' or spaces)."""
    return "_".join(re.sub(r"[^\w.-]+", "-", p).strip("-") or "x" for p in parts)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def confusion_matrix_png(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str], path: str | Path,
                         title: str = "Confusion matrix") -> Path:
    """Counts with row-normalised colours (recall per class on the diagonal), saved as a PNG."""
    from sklearn.metrics import confusion_matrix

    plt = _pyplot()
    labels = [str(label) for label in labels]
    matrix = confusion_matrix([str(y) for y in y_true], [str(y) for y in y_pred], labels=labels)
    rates = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    size = max(4.0, 0.6 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center", color="white" if rates[i, j] > 0.5 else "black",
                    fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.046)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)


def plot_recall_curves(results: list[dict[str, Any]], ks: list[int], output_dir: Path) -> list[Path]:
    """One PNG per dataset x scenario of the retrieval task's `results`: recall@K against K, a line per retriever."""
    plt = _pyplot()
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key in dict.fromkeys((r["dataset"], r["scenario"]) for r in results):
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in (r for r in results if (r["dataset"], r["scenario"]) == key):
            ax.plot(ks, [r["metrics"][f"recall@{k}"] for k in ks], marker="o", label=r["retriever"])
        ax.set(xlabel="K", ylabel="Recall@K", title=f"{key[0]} / {key[1]}", ylim=(0, 1))
        ax.grid(alpha=0.3)
        ax.legend()
        paths.append(_save(fig, output_dir / f"recall_at_k_{key[0]}_{key[1]}.png"))
    return paths


def plot_sts_scatter(dataset: str, pairs: STSPairs, encoders: list[Any], cosines: dict[tuple[str, str], np.ndarray],
                     output_dir: Path) -> Path:
    """One PNG for a dataset: cosine against gold score, a panel per encoder (`cosines[(dataset, encoder name)]`)."""
    plt = _pyplot()
    output_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(encoders), figsize=(4.5 * len(encoders), 4), squeeze=False)
    for ax, spec in zip(axes[0], encoders):
        ax.scatter(pairs.scores, cosines[(dataset, spec.name)], s=6, alpha=0.4)
        ax.set(xlabel="gold score", ylabel="cosine", title=f"{dataset} / {spec.name}")
        ax.grid(alpha=0.3)
    return _save(fig, output_dir / f"sts_scatter_{artifact_name(dataset)}.png")


def plot_few_shot_curve(summary: list[dict[str, Any]], title: str, path: Path,
                        metrics: Sequence[str] = ("accuracy", "f1_macro")) -> Path:
    """Mean ± std over seeds against examples per class, a panel per metric and a line per classifier.

    The x axis is categorical ('all' has no number); error bars are the std over seeds."""
    plt = _pyplot()
    shots = list(dict.fromkeys(str(r["shots"]) for r in summary))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for classifier in dict.fromkeys(r["classifier"] for r in summary):
            rows = {str(r["shots"]): r for r in summary if r["classifier"] == classifier}
            xs = [i for i, s in enumerate(shots) if s in rows]
            ax.errorbar(xs, [rows[shots[i]][f"{metric}_mean"] for i in xs], yerr=[rows[shots[i]][f"{metric}_std"] for i in xs],
                        marker="o", capsize=3, label=classifier)
        ax.set_xticks(range(len(shots)), shots)
        ax.set(xlabel="training examples per class", ylabel=metric, title=f"{title} / {metric}", ylim=(0, 1))
        ax.grid(alpha=0.3)
        ax.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)
