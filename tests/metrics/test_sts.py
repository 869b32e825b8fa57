"""STS metrics against hand-computed values and EDRM worked cases."""
from __future__ import annotations

import numpy as np
import pytest

from lmplatform.metrics.sts import CosineToScale, edrm, pearson, spearman, sts_metrics


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ([5.0], [5.0], 1.0),  # exact answer
        ([0.0], [5.0], 0.0),  # gold at the top, prediction at the bottom: the largest possible miss
        ([0.0], [2.5], 0.0),  # gold mid-scale: dmax is 2.5, so missing by 2.5 is a total miss
        ([5.0], [2.5], 0.0),
        ([3.0], [1.0], 0.5),  # d = 2, dmax = max(1, 4) = 4
        ([1.0], [4.0], 0.25),  # d = 3, dmax = 4
        ([2.0], [3.0], 2 / 3),  # d = 1, dmax = 3
        ([7.0], [4.0], 0.75),  # clipped to 5: d = 1, dmax = 4
        ([3.0, 1.0, 5.0], [1.0, 4.0, 5.0], (0.5 + 0.25 + 1.0) / 3),  # the mean of the cases
    ],
)
def test_edrm_worked_cases(pred, gold, expected) -> None:
    assert edrm(pred, gold, (0.0, 5.0)) == pytest.approx(expected)


def test_edrm_on_another_scale_and_bad_input() -> None:
    # SICK-like 1..5: gold 2 -> dmax = max(1, 3) = 3; pred 4 -> 1 - 2/3
    assert edrm([4.0], [2.0], (1.0, 5.0)) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="on the scale"):
        edrm([1.0], [6.0], (0.0, 5.0))
    with pytest.raises(ValueError, match="one length"):
        edrm([1.0, 2.0], [1.0], (0.0, 5.0))


def test_correlations_match_hand_values() -> None:
    pred, gold = [0.1, 0.4, 0.35, 0.8], [1.0, 2.0, 3.0, 4.0]
    # ranks of pred: 1, 3, 2, 4 -> d^2 = 0 + 1 + 1 + 0 = 2 -> rho = 1 - 6*2/(4*15) = 0.8
    assert spearman(pred, gold) == pytest.approx(0.8)
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    # ties get average ranks: pred ranks 1.5, 1.5, 3 against 1, 2, 3
    assert spearman([0.2, 0.2, 0.9], [1, 2, 3]) == pytest.approx(np.corrcoef([1.5, 1.5, 3], [1, 2, 3])[0, 1])


def test_cosine_to_scale_linear_and_isotonic() -> None:
    linear = CosineToScale((0.0, 5.0))
    assert linear([0.0, 0.5, 1.0, -0.3]).tolist() == [0.0, 2.5, 5.0, 0.0]
    wide = CosineToScale((1.0, 5.0), cosine_range=(-1.0, 1.0))
    assert wide([0.0]).tolist() == [3.0]
    iso = CosineToScale((0.0, 4.0), method="isotonic").fit([0.1, 0.2, 0.3, 0.4], [0.0, 1.0, 3.0, 4.0])
    assert iso([0.1, 0.4, 0.9]).tolist() == [0.0, 4.0, 4.0]
    with pytest.raises(RuntimeError, match="fitted"):
        CosineToScale((0.0, 4.0), method="isotonic")([0.1])


def test_sts_metrics_correlate_raw_cosines_and_map_them_for_edrm() -> None:
    cosines, gold = [0.2, 0.9, 0.5], [1.0, 5.0, 2.0]
    metrics = sts_metrics(cosines, gold, (0.0, 5.0))
    assert metrics["spearman"] == pytest.approx(1.0) and metrics["pairs"] == 3.0
    assert metrics["pearson"] == pytest.approx(pearson(cosines, gold))
    # linear map [0, 1] -> [0, 5]: predictions 1.0, 4.5, 2.5
    assert metrics["edrm"] == pytest.approx(edrm([1.0, 4.5, 2.5], gold, (0.0, 5.0)))
