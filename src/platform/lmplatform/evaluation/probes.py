"""Frozen-encoder linear probes: how much general knowledge an encoder's embeddings still carry.

A logistic regression on standardised mean-pooled embeddings, fitted on a probe's
train split and scored on its dev split. Used as a forgetting probe (GLUE SST-2 /
CoLA before and after domain training). The metric is the task's official one:
accuracy for SST-2, Matthews correlation for CoLA. The probes' data: `lmplatform.data.glue_probes`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lmplatform.data.glue_probes import ProbeData


def linear_probe(train_x: np.ndarray, train_y: Sequence[int], dev_x: np.ndarray, dev_y: Sequence[int],
                 seed: int = 13, c: float = 1.0) -> dict[str, float]:
    """Logistic regression on standardised features; dev accuracy and Matthews correlation."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, matthews_corrcoef
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x)
    model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(scaler.transform(train_x), list(train_y))
    predicted = model.predict(scaler.transform(dev_x))
    return {"accuracy": float(accuracy_score(dev_y, predicted)), "matthews_corr": float(matthews_corrcoef(dev_y, predicted)),
            "train": float(len(train_y)), "dev": float(len(dev_y))}


def probe_encoder(encoder: Any, probe: ProbeData, batch_size: int = 64) -> dict[str, float]:
    """Encode a probe with a frozen `Encoder` (pooled, not normalised) and fit the linear probe; adds `score`."""
    train_x = encoder.encode(probe.train_texts, batch_size, normalize=False)
    dev_x = encoder.encode(probe.dev_texts, batch_size, normalize=False)
    metrics = linear_probe(train_x, probe.train_labels, dev_x, probe.dev_labels)
    return {**metrics, "score": metrics[probe.metric]}
