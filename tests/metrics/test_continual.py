"""Continual-learning metrics against hand-computed matrices."""
from __future__ import annotations

import numpy as np
import pytest

from lmplatform.metrics.continual import (
    average_accuracy,
    backward_transfer,
    bwt_plus,
    continual_metrics,
    final_average_accuracy,
    forward_transfer,
    forward_transfer_upper,
    remembering,
)

# R[i, j]: score on task j after stage i
FORGETS = np.array([
    [0.90, 0.20, 0.10],
    [0.70, 0.80, 0.30],
    [0.60, 0.50, 0.85],
])
IMPROVES = np.array([
    [0.50, 0.30],
    [0.70, 0.60],
])


def test_average_accuracy_is_the_lower_triangle_mean() -> None:
    # (0.9 + 0.7 + 0.8 + 0.6 + 0.5 + 0.85) / 6
    assert average_accuracy(FORGETS) == pytest.approx(4.35 / 6)
    assert final_average_accuracy(FORGETS) == pytest.approx((0.6 + 0.5 + 0.85) / 3)


def test_backward_transfer_rem_and_bwt_plus_when_forgetting() -> None:
    # ((0.7-0.9) + (0.6-0.9) + (0.5-0.8)) / 3 = -0.8/3
    bwt = -0.8 / 3
    assert backward_transfer(FORGETS) == pytest.approx(bwt)
    assert remembering(FORGETS) == pytest.approx(1 - 0.8 / 3)
    assert bwt_plus(FORGETS) == 0.0


def test_backward_transfer_rem_and_bwt_plus_when_improving() -> None:
    assert backward_transfer(IMPROVES) == pytest.approx(0.2)
    assert remembering(IMPROVES) == 1.0
    assert bwt_plus(IMPROVES) == pytest.approx(0.2)


def test_forward_transfer_with_baseline_and_upper_variant() -> None:
    # GEM: ((R[0,1] - b1) + (R[1,2] - b2)) / 2 = ((0.2-0.1) + (0.3-0.1)) / 2
    assert forward_transfer(FORGETS, [0.1, 0.1, 0.1]) == pytest.approx(0.15)
    # Díaz-Rodríguez: (0.2 + 0.1 + 0.3) / 3
    assert forward_transfer_upper(FORGETS) == pytest.approx(0.2)


def test_continual_metrics_values_on_known_matrices() -> None:
    # every value by hand from the matrices above, not from the functions under test
    assert continual_metrics(FORGETS, baseline=[0.1, 0.1, 0.1]) == pytest.approx({
        "A": 4.35 / 6,                          # lower triangle with the diagonal
        "ACC_final": (0.6 + 0.5 + 0.85) / 3,    # last row
        "BWT": -0.8 / 3,                        # ((0.7-0.9) + (0.6-0.9) + (0.5-0.8)) / 3
        "REM": 1 - 0.8 / 3,
        "BWT_plus": 0.0,
        "FWT_upper": (0.2 + 0.1 + 0.3) / 3,     # upper triangle
        "FWT": ((0.2 - 0.1) + (0.3 - 0.1)) / 2,  # R[i-1, i] - b_i
    })
    # no baseline: no FWT; an improving matrix has BWT+ = BWT and nothing forgotten
    assert continual_metrics(IMPROVES) == pytest.approx({
        "A": (0.5 + 0.7 + 0.6) / 3, "ACC_final": (0.7 + 0.6) / 2, "BWT": 0.7 - 0.5, "REM": 1.0, "BWT_plus": 0.2,
        "FWT_upper": 0.3,
    })
    # the baseline is per task: b_0 is never used, b_1 is
    assert continual_metrics(IMPROVES, baseline=[0.9, 0.25])["FWT"] == pytest.approx(0.30 - 0.25)


def test_single_task_and_bad_shapes() -> None:
    assert backward_transfer([[0.4]]) == 0.0 and average_accuracy([[0.4]]) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="square"):
        average_accuracy([[1.0, 2.0]])
    with pytest.raises(ValueError, match="one score per task"):
        forward_transfer(FORGETS, [0.1])
    with pytest.raises(ValueError, match="missing"):
        backward_transfer([[0.5, np.nan], [np.nan, 0.4]])
    # upper-triangle entries may be missing: only the metrics that need them are left out
    assert "FWT_upper" not in continual_metrics([[0.5, np.nan], [0.4, 0.6]])
