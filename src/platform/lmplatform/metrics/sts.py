"""Semantic textual similarity metrics: Spearman, Pearson and EDRM of predicted similarities against gold
scores, and the maps from cosine to a gold scale that EDRM needs.

EDRM ("exactitude en distance relative à la solution moyenne", DEFT 2020 / CLISTER)
scores how close each predicted similarity is to the gold one, relative to the
largest error possible for that gold value on the scale:

    EDRM = 1/N * sum_i (1 - d_i / dmax_i),  d_i = |pred_i - gold_i|,
    dmax_i = max(gold_i - low, high - gold_i)

so a gold score at the middle of the scale can be missed by at most half the
scale, one at an end by the whole scale. Predictions are clipped to the scale
first (a value outside it cannot be "more wrong" than the far end).

Cosine similarities are not on the gold scale, so EDRM needs a map from cosine to
the scale. Two are offered (`CosineToScale`): `linear` rescales a fixed cosine
range ([0, 1] by default, where sentence encoders put almost all pairs) onto the
scale with no fitting; `isotonic` fits a monotone map on a labelled split (train)
and is the fair choice when the encoder's cosines are compressed (MiniLM puts
unrelated sentences near 0.1, not 0). Spearman is unaffected by either map.
"""
from __future__ import annotations

from typing import Literal, Optional, Sequence

import numpy as np
from scipy import stats


def spearman(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """Spearman's ρ = the Pearson correlation of the ranks of `predicted` and `gold` (ties get their average rank);
    with no ties, ρ = 1 − 6 Σ d_i² / (n (n² − 1)), d_i the difference of pair i's two ranks."""
    return float(stats.spearmanr(predicted, gold).statistic)


def pearson(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """Pearson's r = Σ (x_i − x̄)(y_i − ȳ) / sqrt(Σ (x_i − x̄)² Σ (y_i − ȳ)²), x = predicted, y = gold."""
    return float(stats.pearsonr(predicted, gold).statistic)


def edrm(predicted: Sequence[float], gold: Sequence[float], scale: tuple[float, float] = (0.0, 5.0)) -> float:
    """EDRM = (1/N) Σ_i (1 − |pred_i − gold_i| / dmax_i), dmax_i = max(gold_i − low, high − gold_i), with the
    predictions clipped to `scale` = (low, high) first; see the module docstring."""
    low, high = scale
    if not high > low:
        raise ValueError(f"scale must be (low, high) with high > low, got {scale}")
    pred = np.clip(np.asarray(predicted, dtype=np.float64), low, high)
    ref = np.asarray(gold, dtype=np.float64)
    if pred.shape != ref.shape or pred.ndim != 1 or len(ref) == 0:
        raise ValueError(f"predicted and gold must be non-empty 1-d sequences of one length, got {pred.shape} and {ref.shape}")
    if ref.min() < low or ref.max() > high:
        raise ValueError(f"gold scores must lie on the scale {scale}, found [{ref.min()}, {ref.max()}]")
    dmax = np.maximum(ref - low, high - ref)
    return float(np.mean(1.0 - np.abs(pred - ref) / dmax))


class CosineToScale:
    """Maps cosine similarities onto a gold scale (low, high) for EDRM (see the module docstring).

    linear: low + (cos − c_low) / (c_high − c_low) · (high − low), clipped to the scale, with
    (c_low, c_high) = `cosine_range`; isotonic: a monotone step function fitted on labelled pairs.
    """

    def __init__(self, scale: tuple[float, float], method: Literal["linear", "isotonic"] = "linear",
                 cosine_range: tuple[float, float] = (0.0, 1.0)):
        if method not in ("linear", "isotonic"):
            raise ValueError(f"method must be 'linear' or 'isotonic', got {method!r}")
        self.scale = scale
        self.method = method
        self.cosine_range = cosine_range
        self._isotonic = None

    def fit(self, cosines: Sequence[float], gold: Sequence[float]) -> "CosineToScale":
        if self.method == "isotonic":
            from sklearn.isotonic import IsotonicRegression

            self._isotonic = IsotonicRegression(y_min=self.scale[0], y_max=self.scale[1], out_of_bounds="clip")
            self._isotonic.fit(np.asarray(cosines, dtype=np.float64), np.asarray(gold, dtype=np.float64))
        return self

    def __call__(self, cosines: Sequence[float]) -> np.ndarray:
        cos = np.asarray(cosines, dtype=np.float64)
        if self.method == "isotonic":
            if self._isotonic is None:
                raise RuntimeError("isotonic CosineToScale must be fitted on a labelled split first")
            return self._isotonic.predict(cos)
        (c_low, c_high), (low, high) = self.cosine_range, self.scale
        return np.clip(low + (cos - c_low) / (c_high - c_low) * (high - low), low, high)


def sts_metrics(cosines: Sequence[float], gold: Sequence[float], scale: tuple[float, float],
                mapping: Optional[CosineToScale] = None) -> dict[str, float]:
    """Spearman and Pearson of the raw cosines against `gold`, EDRM of the cosines mapped onto `scale` by
    `mapping` (by default linearly from [0, 1]), and the number of pairs."""
    mapping = mapping or CosineToScale(scale)
    gold = np.asarray(gold, dtype=np.float64)
    return {
        "spearman": spearman(cosines, gold),
        "pearson": pearson(cosines, gold),
        "edrm": edrm(mapping(cosines), gold, scale),
        "pairs": float(len(gold)),
    }
