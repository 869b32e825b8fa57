from __future__ import annotations

import numpy as np
import pytest

from lmplatform.metrics.bootstrap import paired_bootstrap


def test_the_bootstrap_interval_follows_the_spread_of_the_gains() -> None:
    same = np.array([0.5, 1.0, 0.0, 0.25])
    assert paired_bootstrap(same, same) == (0.0, 0.0, 0.0)
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 400)
    gain, low, high = paired_bootstrap(base + 0.05 + rng.normal(0, 0.02, 400), base)
    assert low > 0 and low < gain < high
    gain, low, high = paired_bootstrap(base + rng.normal(0.005, 0.3, 400), base)
    assert low < 0 < high  # a small mean gain with a wide spread is noise
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap(np.ones(3), np.ones(4))
