"""`train_frozen_head`: the classifier's MLP head trained on a frozen encoder's cached vectors.

The `classifier` objective with `freeze_encoder=true`, in one process and without Ray: the texts
are encoded once and only the head trains, on the cached vectors. The classification evaluation
task (evaluation/tasks/classification/task.py) uses it for its frozen-encoder rows.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from lmplatform.models.classifier import ClassifierModel, MLPHead, TextClassifier
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.classifier.objective import class_weights


def train_frozen_head(
    encoder: Encoder,
    train_texts: Sequence[str],
    train_labels: Sequence[str],
    dev_texts: Sequence[str] = (),
    dev_labels: Sequence[str] = (),
    hidden: int = 256,
    depth: int = 2,
    epochs: int = 30,
    lr: float = 1e-3,
    batch_size: int = 32,
    class_balance: str = "weighted_loss",
    seed: int = 13,
    embeddings: Optional[dict[str, np.ndarray]] = None,
) -> tuple[TextClassifier, dict[str, float]]:
    """In-process fast path of the frozen setting: encode once, train the MLP head on cached vectors.

    Equivalent to the `classifier` objective with `freeze_encoder=true` (same head, same
    un-normalised pooled inputs, same class weights) without re-running the encoder every
    epoch. The epoch with the best dev accuracy is kept (the last one without a dev set).
    Returns a `TextClassifier` and {"best_epoch", "dev_accuracy"}.
    """
    labels = sorted({str(y) for y in train_labels})
    index = {name: i for i, name in enumerate(labels)}
    cached = embeddings or {}
    x_train = torch.as_tensor(cached["train"] if "train" in cached else encoder.encode(train_texts, batch_size, normalize=False))
    y_train = torch.as_tensor([index[str(y)] for y in train_labels])
    has_dev = len(dev_texts) > 0
    if has_dev:
        x_dev = torch.as_tensor(cached["dev"] if "dev" in cached else encoder.encode(dev_texts, batch_size, normalize=False))
        y_dev = torch.as_tensor([index.get(str(y), -1) for y in dev_labels])
    torch.manual_seed(seed)
    head = MLPHead(x_train.shape[1], len(labels), hidden, depth)
    weights = None
    if class_balance == "weighted_loss":
        counts = {c: int((y_train == c).sum()) for c in range(len(labels))}
        weights = class_weights(counts, len(labels))
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    best_state, best_acc, best_epoch = None, -1.0, 0
    for epoch in range(1, epochs + 1):
        head.train()
        for batch in torch.randperm(len(x_train), generator=generator).split(batch_size):
            loss = torch.nn.functional.cross_entropy(head(x_train[batch]), y_train[batch], weight=weights)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if has_dev:
            head.eval()
            with torch.no_grad():
                accuracy = float((head(x_dev).argmax(-1) == y_dev).float().mean())
            if accuracy > best_acc:
                best_acc, best_epoch = accuracy, epoch
                best_state = {k: v.clone() for k, v in head.state_dict().items()}
    if best_state is not None:
        head.load_state_dict(best_state)
    else:
        best_epoch = epochs
    classifier = TextClassifier(ClassifierModel(encoder, head, labels, freeze_encoder=True))
    return classifier, {"best_epoch": float(best_epoch), "dev_accuracy": best_acc if has_dev else float("nan")}
