"""Text classifiers on top of an `Encoder`: an MLP head (trainable) and KNN on embeddings.

A saved `TextClassifier` is the encoder's Hugging Face folder plus two files:
`classifier_head.pt` (the head's state dict) and `labels.json` (class names in
logit order and the head's shape), so any tool that loads the encoder still can.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

from lmplatform.models.encoder import Encoder

HEAD_FILE = "classifier_head.pt"
LABELS_FILE = "labels.json"


class MLPHead(nn.Module):
    """`depth` linear layers; the hidden ones use GELU and dropout."""

    def __init__(self, dim: int, num_classes: int, hidden: int = 256, depth: int = 2, dropout: float = 0.1):
        super().__init__()
        if depth < 1:
            raise ValueError(f"head depth must be >= 1, got {depth}")
        layers: list[nn.Module] = []
        width = dim
        for _ in range(depth - 1):
            layers += [nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout)]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)
        self.shape = {"dim": dim, "num_classes": num_classes, "hidden": hidden, "depth": depth, "dropout": dropout}

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.layers(pooled)


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


class ClassifierModel(nn.Module):
    """Encoder + pooling + MLP head -> logits. A frozen encoder runs without gradients and in eval mode."""

    def __init__(self, encoder: Encoder, head: MLPHead, labels: Sequence[str], freeze_encoder: bool = False):
        super().__init__()
        if len(labels) != head.shape["num_classes"]:
            raise ValueError(f"{len(labels)} labels for a head with {head.shape['num_classes']} outputs")
        self.encoder = encoder
        self.head = head
        self.labels = list(labels)
        self.freeze_encoder = freeze_encoder
        if freeze_encoder:
            for param in encoder.parameters():
                param.requires_grad_(False)

    def train(self, mode: bool = True) -> "ClassifierModel":
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()  # no dropout in a frozen feature extractor
        return self

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.freeze_encoder:
            with torch.no_grad():
                return self.encoder(input_ids, attention_mask)
        return self.encoder(input_ids, attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(input_ids, attention_mask))

    def save_pretrained(self, path: str | Path) -> Path:
        path = self.encoder.save_pretrained(path)
        torch.save(self.head.state_dict(), path / HEAD_FILE)
        (path / LABELS_FILE).write_text(json.dumps({"labels": self.labels, "head": self.head.shape}, indent=2))
        return path


class TextClassifier:
    """Load a saved classifier folder and predict."""

    def __init__(self, model: ClassifierModel):
        self.model = model.eval()

    @property
    def labels(self) -> list[str]:
        return self.model.labels

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "TextClassifier":
        path = Path(path)
        meta_file = path / LABELS_FILE
        if not meta_file.is_file() or not (path / HEAD_FILE).is_file():
            raise FileNotFoundError(f"{path} is not a classifier folder: {LABELS_FILE} and {HEAD_FILE} are required")
        meta = json.loads(meta_file.read_text())
        encoder = Encoder.from_pretrained(path)
        shape = meta["head"]
        head = MLPHead(shape["dim"], shape["num_classes"], shape["hidden"], shape["depth"], shape["dropout"])
        head.load_state_dict(torch.load(path / HEAD_FILE, map_location="cpu", weights_only=True))
        return cls(ClassifierModel(encoder, head, meta["labels"]))

    def predict_proba(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), len(self.labels)), dtype=np.float32)
        encoder = self.model.encoder
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                index = order[start : start + batch_size]
                features = encoder.tokenize([texts[i] for i in index])
                logits = self.model(features["input_ids"], features["attention_mask"])
                out[index] = torch.softmax(logits.float(), dim=-1).numpy()
        return out

    def predict(self, texts: Sequence[str], batch_size: int = 32) -> list[str]:
        return [self.labels[i] for i in self.predict_proba(texts, batch_size).argmax(axis=1)]


class KNNClassifier:
    """k nearest neighbours on normalised embeddings (cosine), distance-weighted votes."""

    def __init__(self, encoder: Encoder, k: int = 5, batch_size: int = 32):
        self.encoder = encoder
        self.k = k
        self.batch_size = batch_size
        self._knn = None

    @property
    def labels(self) -> list[str]:
        if self._knn is None:
            raise RuntimeError("call fit(texts, labels) first")
        return [str(c) for c in self._knn.classes_]

    def fit(self, texts: Sequence[str], labels: Sequence[str], embeddings: Optional[np.ndarray] = None) -> "KNNClassifier":
        from sklearn.neighbors import KNeighborsClassifier

        vectors = embeddings if embeddings is not None else self.encoder.encode(texts, self.batch_size, normalize=True)
        # On unit vectors Euclidean order equals cosine order.
        self._knn = KNeighborsClassifier(n_neighbors=min(self.k, len(vectors)), weights="distance")
        self._knn.fit(vectors, [str(label) for label in labels])
        return self

    def predict_proba(self, texts: Sequence[str], embeddings: Optional[np.ndarray] = None) -> np.ndarray:
        if self._knn is None:
            raise RuntimeError("call fit(texts, labels) first")
        vectors = embeddings if embeddings is not None else self.encoder.encode(texts, self.batch_size, normalize=True)
        return self._knn.predict_proba(vectors)

    def predict(self, texts: Sequence[str], embeddings: Optional[np.ndarray] = None) -> list[str]:
        return [self.labels[i] for i in self.predict_proba(texts, embeddings).argmax(axis=1)]
