"""Bi-encoder training on (query, document) pairs with in-batch negatives.

Each query's positive is its own document; every other document of the global
batch, plus any hard negatives, is a negative (multiple-negatives ranking loss,
Henderson et al., 2017). Queries and documents share one `Encoder`.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedTokenizerBase

from lmplatform.models.encoder import Encoder
from lmplatform.objectives.infonce import Temperature, info_nce
from lmplatform.train.recipe import Batch, WeightedMetrics


def _texts(column: np.ndarray) -> list[str]:
    return [str(t) for t in column]


class PairCollator:
    """Pairs -> query_*, document_* and (when present) negative_* token tensors."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int, max_hard_negatives: int = 0):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.max_hard_negatives = max_hard_negatives

    def _encode(self, prefix: str, texts: Sequence[str]) -> Batch:
        features = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                                  pad_to_multiple_of=8, return_tensors="pt")
        return {f"{prefix}_input_ids": features["input_ids"], f"{prefix}_attention_mask": features["attention_mask"]}

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        out = self._encode("query", _texts(batch["query"])) | self._encode("document", _texts(batch["document"]))
        if self.max_hard_negatives and "hard_negatives" in batch:
            negatives = [str(t) for row in batch["hard_negatives"] for t in list(row)[: self.max_hard_negatives]]
            if negatives:
                out |= self._encode("negative", negatives)
        return out


def count_pair_tokens(batch: Batch) -> int:
    return int(sum(v.sum() for k, v in batch.items() if k.endswith("_attention_mask")))


def embed(model: Encoder, batch: Batch, prefix: str) -> Optional[torch.Tensor]:
    if f"{prefix}_input_ids" not in batch:
        return None
    return model(input_ids=batch[f"{prefix}_input_ids"], attention_mask=batch[f"{prefix}_attention_mask"])


class BiencoderObjective(nn.Module):
    """uses_hard_negatives: the data has a hard-negative field. Then every step passes a (possibly
    empty) negatives tensor, so all workers enter the same collectives even when only some of
    their batches hold hard negatives."""

    def __init__(self, temperature: Temperature, symmetric: bool = False, gather: bool = True,
                 uses_hard_negatives: bool = False):
        super().__init__()
        self.temperature = temperature
        self.symmetric = symmetric
        self.gather = gather
        self.uses_hard_negatives = uses_hard_negatives

    def forward(self, model: Encoder, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        queries, documents = embed(model, batch, "query"), embed(model, batch, "document")
        negatives = embed(model, batch, "negative")
        if negatives is None and self.uses_hard_negatives:
            negatives = documents.new_zeros((0, documents.shape[1]))
        out = info_nce(
            queries, documents, self.temperature(),
            symmetric=self.symmetric, hard_negatives=negatives, gather=self.gather,
        )
        metrics = out.metrics("ranking_") | {"temperature": float(self.temperature().detach())}
        return out.loss, metrics


class InBatchRetrievalEvaluator:
    """In-batch retrieval on validation pairs, a cheap diagnostic: each query ranks its batch's documents
    (and hard negatives). Ties count against the query. The numbers depend on the batch size; choose
    models on corpus-level metrics (`retrieval_validation`, val_ir_*) instead.

    Returns weighted sums of the InfoNCE loss, accuracy@1 (the own document ranks first, alone),
    MRR and the mean number of candidates. The caller sets eval and inference mode and places the batches.
    """

    def __init__(self, temperature: Temperature):
        self.temperature = temperature

    def __call__(self, model: Encoder, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        sums = {"ranking_loss": 0.0, "inbatch_accuracy": 0.0, "inbatch_mrr": 0.0, "inbatch_candidates": 0.0}
        n = 0.0
        for batch in batches:
            queries = F.normalize(embed(model, batch, "query").float(), dim=-1)
            documents = F.normalize(embed(model, batch, "document").float(), dim=-1)
            negatives = embed(model, batch, "negative")
            candidates = documents if negatives is None else torch.cat([documents, F.normalize(negatives.float(), dim=-1)])
            scores = queries @ candidates.T
            own = scores.diagonal()[:, None]
            ranks = (scores >= own).sum(1).float()  # the own document and every tie ahead of it
            labels = torch.arange(len(queries), device=scores.device)
            sums["ranking_loss"] += float(F.cross_entropy(scores / self.temperature(), labels, reduction="sum"))
            sums["inbatch_accuracy"] += float((ranks == 1).sum())
            sums["inbatch_mrr"] += float((1.0 / ranks).sum())
            sums["inbatch_candidates"] += float(candidates.shape[0] * len(queries))
            n += len(queries)
        return {name: (value, n) for name, value in sums.items()}
