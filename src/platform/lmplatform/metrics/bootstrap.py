"""Bootstrap intervals over per-query scores: the uncertainty every quality claim carries."""
from __future__ import annotations

import numpy as np


def paired_bootstrap(candidate: np.ndarray, comparator: np.ndarray, level: float = 0.95,
                     resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean gain, CI low, CI high) of candidate − comparator over the same queries [q], percentile bootstrap.

    Resampling whole queries keeps each query's pair together, so the interval reflects how much the
    gain depends on which queries happened to be in the set.
    """
    candidate, comparator = np.asarray(candidate, dtype=np.float64), np.asarray(comparator, dtype=np.float64)
    if candidate.shape != comparator.shape or candidate.ndim != 1 or not len(candidate):
        raise ValueError(f"need two equal-length, non-empty score vectors, got {candidate.shape} and {comparator.shape}")
    gains = candidate - comparator
    mean = float(gains.mean())
    if np.all(gains == gains[0]):  # no spread to resample (e.g. the same model twice)
        return mean, mean, mean
    from scipy.stats import bootstrap

    result = bootstrap((gains,), np.mean, confidence_level=level, n_resamples=resamples, method="percentile",
                       random_state=np.random.default_rng(seed))
    return mean, float(result.confidence_interval.low), float(result.confidence_interval.high)
