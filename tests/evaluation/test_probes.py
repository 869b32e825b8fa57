"""The linear probe separates what is separable and scores chance as chance."""
from __future__ import annotations

import numpy as np

from lmplatform.evaluation.probes import linear_probe


def test_linear_probe_scores_separable_features_high_and_noise_near_zero_mcc() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    signal = rng.normal(size=(400, 8)) + 3.0 * y[:, None]
    good = linear_probe(signal[:300], y[:300], signal[300:], y[300:])
    assert good["accuracy"] > 0.95 and good["matthews_corr"] > 0.9 and good["dev"] == 100
    noise = rng.normal(size=(400, 8))
    bad = linear_probe(noise[:300], y[:300], noise[300:], y[300:])
    assert abs(bad["matthews_corr"]) < 0.3
