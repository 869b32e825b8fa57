"""MLP head shapes, freezing, save/load round trip of TextClassifier, and the KNN classifier."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lmplatform.models.classifier import ClassifierModel, KNNClassifier, MLPHead, TextClassifier, count_parameters
from lmplatform.models.encoder import Encoder


def test_head_depth_and_freezing(tiny_bert: Path) -> None:
    head = MLPHead(32, 3, hidden=16, depth=2)
    assert [type(m).__name__ for m in head.layers] == ["Linear", "GELU", "Dropout", "Linear"]
    assert count_parameters(MLPHead(32, 3, depth=1)) == 32 * 3 + 3
    encoder = Encoder.from_pretrained(tiny_bert)
    frozen = ClassifierModel(encoder, head, ["a", "b", "c"], freeze_encoder=True)
    assert count_parameters(frozen, trainable_only=True) == count_parameters(head) == 32 * 16 + 16 + 16 * 3 + 3
    frozen.train()
    assert frozen.head.training and not frozen.encoder.training
    with pytest.raises(ValueError, match="2 labels for a head with 3"):
        ClassifierModel(encoder, MLPHead(32, 3), ["a", "b"])


def test_text_classifier_round_trip(tiny_bert: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ClassifierModel(Encoder.from_pretrained(tiny_bert), MLPHead(32, 3, hidden=8), ["disk", "net", "auth"])
    model.eval()
    texts = ["disk full on server", "vpn tunnel down", "login failed"]
    features = model.encoder.tokenize(texts)
    with torch.no_grad():
        expected = torch.softmax(model(features["input_ids"], features["attention_mask"]), -1).numpy()
    folder = model.save_pretrained(tmp_path / "clf")
    assert (folder / "classifier_head.pt").is_file() and (folder / "labels.json").is_file() and (folder / "config.json").is_file()
    loaded = TextClassifier.from_pretrained(folder)
    proba = loaded.predict_proba(texts)
    assert loaded.labels == ["disk", "net", "auth"]
    assert proba == pytest.approx(expected, abs=1e-5) and np.allclose(proba.sum(1), 1.0)
    assert loaded.predict(texts) == [loaded.labels[i] for i in expected.argmax(1)]
    with pytest.raises(FileNotFoundError, match="not a classifier folder"):
        TextClassifier.from_pretrained(tiny_bert)


def test_knn_classifier_uses_nearest_embeddings(tiny_bert: Path) -> None:
    knn = KNNClassifier(Encoder.from_pretrained(tiny_bert), k=1)
    train = ["disk full on server", "vpn tunnel down", "login failed for user"]
    knn.fit(train, ["storage", "network", "auth"])
    assert knn.labels == ["auth", "network", "storage"]
    assert knn.predict(train) == ["storage", "network", "auth"]  # each text is its own nearest neighbour
    proba = knn.predict_proba(["disk full on server"])
    assert proba.shape == (1, 3) and proba[0, 2] == 1.0
