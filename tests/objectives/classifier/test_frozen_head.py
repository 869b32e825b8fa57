"""The head trained on cached vectors of a frozen encoder learns two separable classes and packages a TextClassifier."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmplatform.jobs.frozen_vs_finetuned import evaluate_classifier
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.classifier.frozen_head import train_frozen_head


def test_train_frozen_head_learns_and_packages_a_text_classifier(tiny_bert: Path) -> None:
    vocab = {"storage": "disk backup queue memory".split(), "network": "vpn tunnel network certificate".split()}
    rng = np.random.default_rng(0)

    def make(n: int) -> tuple[list[str], list[str]]:
        labels = [list(vocab)[i % 2] for i in range(n)]
        return [" ".join(rng.choice(vocab[y], 5)) for y in labels], labels

    encoder = Encoder.from_pretrained(tiny_bert)
    classifier, info = train_frozen_head(encoder, *make(40), *make(20), hidden=16, epochs=15, lr=5e-3)
    assert info["dev_accuracy"] >= 0.8 and 1 <= info["best_epoch"] <= 15
    texts, labels = make(20)
    metrics, png = evaluate_classifier(classifier, texts, labels)
    assert metrics["accuracy"] >= 0.8 and png is None
    assert classifier.labels == ["network", "storage"]
