"""Frozen-encoder linear probes: how much general knowledge an encoder's embeddings still carry.

A logistic regression on standardised mean-pooled embeddings, fitted on a probe's
train split and scored on its dev split. Used as a forgetting probe (GLUE SST-2 /
CoLA before and after domain training). The metric is the task's official one:
accuracy for SST-2, Matthews correlation for CoLA.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

# probe -> (train file, dev file, metric)
GLUE_FILES = {"sst2": ("train_10k.jsonl", "dev.jsonl", "accuracy"), "cola": ("train.jsonl", "dev.jsonl", "matthews_corr")}


@dataclass
class ProbeData:
    name: str
    metric: str
    train_texts: list[str]
    train_labels: list[int]
    dev_texts: list[str]
    dev_labels: list[int]


def _read(path: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row.get("sentence"), str) or row.get("label") not in (0, 1):
                raise ValueError(f"{path}:{line_no}: needs a 'sentence' text and a 0/1 'label'")
            texts.append(row["sentence"])
            labels.append(int(row["label"]))
    return texts, labels


def read_glue_probe(name: str, root: Path, train_limit: Optional[int] = None,
                    dev_limit: Optional[int] = None, seed: int = 13) -> ProbeData:
    """A GLUE probe's train (a seeded sample of `train_limit` rows) and dev split (the first `dev_limit`);
    `root` holds one folder per probe (e.g. the shared data's glue_probes/)."""
    if name not in GLUE_FILES:
        raise ValueError(f"unknown probe {name!r}; available: {', '.join(sorted(GLUE_FILES))}")
    train_file, dev_file, metric = GLUE_FILES[name]
    train_texts, train_labels = _read(root / name / train_file)
    if train_limit and train_limit < len(train_texts):
        keep = sorted(random.Random(seed).sample(range(len(train_texts)), train_limit))
        train_texts, train_labels = [train_texts[i] for i in keep], [train_labels[i] for i in keep]
    dev_texts, dev_labels = _read(root / name / dev_file)
    return ProbeData(name, metric, train_texts, train_labels, dev_texts[:dev_limit], dev_labels[:dev_limit])


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
