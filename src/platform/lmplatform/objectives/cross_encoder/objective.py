"""Cross-encoder re-ranker training: each query with its positive and its negatives, scored by BCE.

A training row is one group: a query, its positive document and its negatives
(chosen once on the driver, see cross_encoder_recipe.py). The collator expands a
group into 1 + k (query, document) sequences labelled 1, 0, ..., 0.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.train.recipe import Batch, WeightedMetrics

_NOT_FEATURES = ("labels", "group_ids")


class GroupCollator:
    """Groups {query, document, negatives} -> tokenised pairs with `labels` and `group_ids`."""

    def __init__(self, model: CrossEncoder):
        self.model = model

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        queries: list[str] = []
        documents: list[str] = []
        labels: list[float] = []
        groups: list[int] = []
        for index, (query, positive, negatives) in enumerate(zip(batch["query"], batch["document"], batch["negatives"])):
            for document, label in [(positive, 1.0)] + [(n, 0.0) for n in list(negatives)]:
                queries.append(str(query))
                documents.append(str(document))
                labels.append(label)
                groups.append(index)
        features = dict(self.model.tokenize(queries, documents))
        return features | {"labels": torch.tensor(labels), "group_ids": torch.tensor(groups)}


def logits_of(model: CrossEncoder, batch: Batch) -> torch.Tensor:
    return model(**{k: v for k, v in batch.items() if k not in _NOT_FEATURES})


class CrossEncoderObjective(nn.Module):
    def forward(self, model: CrossEncoder, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        logits = logits_of(model, batch).float()
        loss = F.binary_cross_entropy_with_logits(logits, batch["labels"])
        accuracy = float(((logits.detach() > 0).float() == batch["labels"]).float().mean())
        return loss, {"bce_loss": float(loss.detach()), "accuracy": accuracy}


class RerankEvaluator:
    """BCE and accuracy per pair; per group (the query's positive and its drawn negatives) the share of
    negatives the positive outscores and its reciprocal rank, ties against it: in-batch diagnostics.
    The caller sets eval and inference mode and places the batches (the training loop does)."""

    def __call__(self, model: CrossEncoder, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        bce = correct = pairs = wins = comparisons = reciprocal = groups = 0.0
        for batch in batches:
            logits = logits_of(model, batch).float()
            labels, group_ids = batch["labels"], batch["group_ids"]
            bce += float(F.binary_cross_entropy_with_logits(logits, labels, reduction="sum"))
            correct += float(((logits > 0).float() == labels).sum())
            pairs += len(labels)
            for group in group_ids.unique():
                members = group_ids == group
                scores, is_positive = logits[members], labels[members] > 0.5
                positive = scores[is_positive].max()
                negatives = scores[~is_positive]
                wins += float((positive > negatives).sum())
                comparisons += len(negatives)
                reciprocal += 1.0 / (1.0 + float((negatives >= positive).sum()))
                groups += 1
        return {
            "bce_loss": (bce, pairs),
            "accuracy": (correct, pairs),
            "inbatch_pairwise_accuracy": (wins, comparisons),
            "inbatch_mrr": (reciprocal, groups),
        }
