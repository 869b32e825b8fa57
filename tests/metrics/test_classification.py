"""Classification metrics against hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from lmplatform.metrics.classification import classification_metrics


def test_binary_metrics_by_hand() -> None:
    y = ["pos", "neg", "pos", "neg"]
    proba = np.array([[0.2, 0.8], [0.6, 0.4], [0.7, 0.3], [0.9, 0.1]])  # columns: neg, pos
    m = classification_metrics(y, proba, ["neg", "pos"])
    assert m["accuracy"] == 0.75  # third example wrong
    # AUC: positives score 0.8, 0.3; negatives 0.4, 0.1 -> pairs won: (0.8>0.4, 0.8>0.1, 0.3<0.4, 0.3>0.1) = 3/4
    assert m["roc_auc"] == pytest.approx(0.75)
    # pos: P=1/1, R=1/2, F1=2/3; neg: P=2/3, R=1, F1=0.8 -> macro F1 = (2/3+0.8)/2
    assert m["f1_macro"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert m["precision_macro"] == pytest.approx((1 + 2 / 3) / 2)
    assert m["recall_weighted"] == pytest.approx(0.75)  # weighted recall equals accuracy


def test_multiclass_auc_is_macro_one_vs_rest_and_skips_undefined_classes() -> None:
    from sklearn.metrics import roc_auc_score

    labels = ["a", "b", "c", "d"]
    rng = np.random.default_rng(0)
    y = ["a", "b", "c", "a", "b", "c", "a", "c"]  # "d" never occurs: its AUC is undefined
    proba = rng.dirichlet(np.ones(4), size=len(y))
    m = classification_metrics(y, proba, labels)
    ids = np.array([labels.index(v) for v in y])
    expected = np.mean([roc_auc_score(ids == c, proba[:, c]) for c in range(3)])
    assert m["roc_auc"] == pytest.approx(expected) and m["roc_auc_classes"] == 3
    with pytest.raises(ValueError, match="not among"):
        classification_metrics(["z"], proba[:1], labels)
    with pytest.raises(ValueError, match="proba must be"):
        classification_metrics(y, proba[:, :3], labels)
