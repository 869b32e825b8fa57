"""The toy objective: an `Encoder` whose pooled vectors should have length `target_norm`."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import torch
from torch import nn

from lmplatform.data.corpus import corpus_datasets, scan_corpus
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.collate import TextCollator
from lmplatform.train.recipe import Batch, PreparedData, TrainingRecipe, WeightedMetrics


def norm_loss(vectors: torch.Tensor, target: float) -> torch.Tensor:
    """mean_i (‖v_i‖₂ − target)²; vectors [b, d] -> a scalar."""
    return ((vectors.float().norm(dim=-1) - target) ** 2).mean()


class ToyNormObjective(nn.Module):
    def __init__(self, target: float):
        super().__init__()
        self.target = target

    def forward(self, model: Encoder, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        loss = norm_loss(model(batch["input_ids"], batch["attention_mask"]), self.target)
        return loss, {"norm_error": float(loss.detach())}


class ToyNormEvaluator:
    """The mean squared norm error over the validation texts, as a weighted sum."""

    def __init__(self, target: float):
        self.target = target

    def __call__(self, model: Encoder, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        total = count = 0.0
        for batch in batches:
            vectors = model(batch["input_ids"], batch["attention_mask"])
            total += float(norm_loss(vectors, self.target)) * len(vectors)
            count += len(vectors)
        return {"norm_error": (total, count)}


def prepare_data(cfg: RunConfig) -> PreparedData:
    """Texts of a corpus, as the MLM objective reads them (the test feeds the loop its own batches)."""
    corpus = scan_corpus(cfg.data)
    report = corpus.report
    return PreparedData(datasets=corpus_datasets(corpus), train_examples=report.train_documents,
                        metrics=report.metrics(), summary=report.summary(), fingerprint=report.fingerprint)


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    encoder = Encoder.from_pretrained(cfg.model.name_or_path, pooling=cfg.model.pooling, max_seq_length=cfg.model.max_seq_length)

    def export(trained: Encoder, folder: Path) -> None:
        trained.save_pretrained(folder)

    return TrainingRecipe(
        model=encoder,
        objective=ToyNormObjective(cfg.objective.target_norm),
        collate=TextCollator(encoder.tokenizer, cfg.model.max_seq_length),
        export=export,
        evaluate=ToyNormEvaluator(cfg.objective.target_norm),
    )
