"""Classification metrics of class probabilities against true labels.

Metrics follow the incident-report study's tables: accuracy, ROC-AUC, and F1 /
precision / recall both weighted and macro. ROC-AUC is the binary AUC for two
classes and the macro mean of one-vs-rest AUCs otherwise; a class with no
positive (or no negative) example in `y_true` has no defined AUC and is left
out of the mean (the number of classes used is reported as `roc_auc_classes`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def classification_metrics(y_true: Sequence[str], proba: np.ndarray, labels: Sequence[str]) -> dict[str, float]:
    """Metrics of class probabilities `proba` [n, len(labels)] against true label names `y_true` [n].

    With ŷ_i = argmax_c proba[i, c]:
    - accuracy = (1/n) Σ_i 1[ŷ_i = y_i]
    - per class c: P_c = TP_c / (TP_c + FP_c), R_c = TP_c / (TP_c + FN_c), F1_c = 2 P_c R_c / (P_c + R_c)
      (0 where a denominator is 0), over the classes present in y_true or ŷ; `_macro` is their plain
      mean, `_weighted` their mean weighted by each class's count in y_true.
    - roc_auc: two classes, AUC = P(proba[i, 1] > proba[j, 1]) for a random positive i and negative j
      (ties count 1/2); more, the mean over classes of the one-vs-rest AUC of proba[:, c].
    Also `examples` (n) and `roc_auc_classes` (how many classes the AUC averages).
    """
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support, roc_auc_score

    labels = [str(label) for label in labels]
    proba = np.asarray(proba, dtype=np.float64)
    if proba.shape != (len(y_true), len(labels)):
        raise ValueError(f"proba must be [{len(y_true)}, {len(labels)}], got {list(proba.shape)}")
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted({str(y) for y in y_true} - set(index))
    if unknown:
        raise ValueError(f"true labels not among the classifier's classes: {unknown}")
    true_ids = np.array([index[str(y)] for y in y_true])
    pred_ids = proba.argmax(axis=1)
    out: dict[str, float] = {"accuracy": float(accuracy_score(true_ids, pred_ids)), "examples": float(len(true_ids))}
    present = sorted(set(true_ids.tolist()) | set(pred_ids.tolist()))
    for average in ("macro", "weighted"):
        p, r, f, _ = precision_recall_fscore_support(true_ids, pred_ids, labels=present, average=average, zero_division=0)
        out |= {f"precision_{average}": float(p), f"recall_{average}": float(r), f"f1_{average}": float(f)}
    if len(labels) == 2:
        both = len(set(true_ids.tolist())) == 2
        out["roc_auc"] = float(roc_auc_score(true_ids, proba[:, 1])) if both else float("nan")
        out["roc_auc_classes"] = 2.0 if both else 0.0
    else:
        aucs = [roc_auc_score(true_ids == c, proba[:, c]) for c in range(len(labels))
                if 0 < (true_ids == c).sum() < len(true_ids)]
        out["roc_auc"] = float(np.mean(aucs)) if aucs else float("nan")
        out["roc_auc_classes"] = float(len(aucs))
    return out


# The metrics a report's table shows, in the incident-report study's order.
TABLE_COLUMNS = ("accuracy", "roc_auc", "f1_weighted", "precision_weighted", "recall_weighted", "f1_macro",
                 "precision_macro", "recall_macro")
