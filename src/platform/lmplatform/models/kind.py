"""What a model folder is, by how it loads: an `Encoder` (texts to vectors), a `CrossEncoder` (scores a (query,
document) pair) or a `TextClassifier` (labels). One vocabulary for the objectives' specs (what a trained model is),
the champion gate (how it is scored) and export (what a folder holds)."""
from __future__ import annotations

from typing import Literal

ModelKind = Literal["encoder", "cross_encoder", "classifier"]
ENCODER: ModelKind = "encoder"
CROSS_ENCODER: ModelKind = "cross_encoder"
CLASSIFIER: ModelKind = "classifier"
