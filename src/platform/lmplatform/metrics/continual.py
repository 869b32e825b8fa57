"""Continual-learning metrics over a task-score matrix R (N stages x N tasks).

R[i, j] = score on task j after training stage i (0-based here; higher is better). Following
Díaz-Rodríguez et al., 2018, "Don't forget, there is more than forgetting: new metrics for Continual
Learning" (arXiv:1810.13166), and Lopez-Paz & Ranzato, 2017 (GEM) for the baseline-relative forward
transfer. The scores themselves are measured elsewhere (e.g. `evaluation.old_domain_mlm`).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def _matrix(R: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    matrix = np.asarray(R, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] == 0:
        raise ValueError(f"R must be a square N x N matrix (stage x task), got shape {matrix.shape}")
    return matrix


def _lower_entries(matrix: np.ndarray, strict: bool) -> np.ndarray:
    rows, cols = np.tril_indices(matrix.shape[0], k=-1 if strict else 0)
    entries = matrix[rows, cols]
    if not np.isfinite(entries).all():
        raise ValueError("R has missing (NaN) entries on or below the diagonal; every task seen so far must be scored")
    return entries


def average_accuracy(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """A = Σ_{i≥j} R[i, j] / (N(N+1)/2): the mean over every stage of the scores on the tasks seen so far.

    (Díaz-Rodríguez et al., 2018, eq. 1.) Unlike the final-row mean, it rewards a
    model that is good early as well as at the end.
    """
    return float(_lower_entries(_matrix(R), strict=False).mean())


def final_average_accuracy(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """ACC = (1/N) Σ_j R[N-1, j]: the mean score on all tasks after the last stage (Lopez-Paz & Ranzato, 2017)."""
    matrix = _matrix(R)
    return float(matrix[-1].mean())


def backward_transfer(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """BWT = Σ_{i=2}^{N} Σ_{j=1}^{i-1} (R[i, j] − R[j, j]) / (N(N−1)/2)  (1-based indices).

    The mean change of a task's score after later stages, relative to right after
    its own stage; negative is forgetting. (Díaz-Rodríguez et al., 2018, eq. 2.)
    A single task has no backward transfer: returns 0.0.
    """
    matrix = _matrix(R)
    n = matrix.shape[0]
    if n < 2:
        return 0.0
    rows, cols = np.tril_indices(n, k=-1)
    _lower_entries(matrix, strict=False)
    return float((matrix[rows, cols] - matrix[cols, cols]).mean())


def remembering(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """REM = 1 − |min(BWT, 0)|: 1 when nothing is forgotten (Díaz-Rodríguez et al., 2018, eq. 3)."""
    return 1.0 - abs(min(backward_transfer(R), 0.0))


def bwt_plus(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """BWT+ = max(BWT, 0): only the improvement on earlier tasks (Díaz-Rodríguez et al., 2018, eq. 4)."""
    return max(backward_transfer(R), 0.0)


def forward_transfer(R: Sequence[Sequence[float]] | np.ndarray, baseline: Sequence[float]) -> float:
    """FWT = (1/(N−1)) Σ_{i=2}^{N} (R[i−1, i] − b_i)  (1-based indices; Lopez-Paz & Ranzato, 2017).

    How much training on the earlier stages helps a task before it is trained on:
    the score of task i right before its stage, minus b_i, the score of the
    starting model (no training) on task i.
    """
    matrix = _matrix(R)
    n = matrix.shape[0]
    b = np.asarray(baseline, dtype=np.float64)
    if b.shape != (n,):
        raise ValueError(f"baseline must have one score per task ({n}), got shape {b.shape}")
    if n < 2:
        return 0.0
    before = np.array([matrix[i - 1, i] for i in range(1, n)])
    if not np.isfinite(before).all():
        raise ValueError("forward transfer needs R[i-1, i] (each task scored just before its stage)")
    return float((before - b[1:]).mean())


def forward_transfer_upper(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """FWT' = Σ_{i<j} R[i, j] / (N(N−1)/2): Díaz-Rodríguez et al.'s baseline-free variant (eq. 5),
    the mean score on tasks not yet trained on, over every earlier stage."""
    matrix = _matrix(R)
    n = matrix.shape[0]
    if n < 2:
        return 0.0
    rows, cols = np.triu_indices(n, k=1)
    entries = matrix[rows, cols]
    if not np.isfinite(entries).all():
        raise ValueError("FWT' needs every entry above the diagonal")
    return float(entries.mean())


def continual_metrics(R: Sequence[Sequence[float]] | np.ndarray, baseline: Optional[Sequence[float]] = None) -> dict[str, float]:
    """Every metric above that R (and the baseline, when given) defines."""
    matrix = _matrix(R)
    out = {
        "A": average_accuracy(matrix),
        "ACC_final": final_average_accuracy(matrix),
        "BWT": backward_transfer(matrix),
        "REM": remembering(matrix),
        "BWT_plus": bwt_plus(matrix),
    }
    n = matrix.shape[0]
    upper = matrix[np.triu_indices(n, k=1)]
    if n > 1 and np.isfinite(upper).all():
        out["FWT_upper"] = forward_transfer_upper(matrix)
    if baseline is not None and n > 1 and all(np.isfinite(matrix[i - 1, i]) for i in range(1, n)):
        out["FWT"] = forward_transfer(matrix, baseline)
    return out
