"""Bi-encoder training on (query, document) pairs with in-batch negatives.

Each query's positive is its own document; every other document of the global
batch, plus any hard negatives, is a negative (multiple-negatives ranking loss,
Henderson et al., 2017). Queries and documents share one `Encoder`. The driver
reads the pairs (`prepare_data`); each worker builds the recipe (`build_recipe`).
With `objective.mini_batch_size` the loss is computed with GradCache (objectives/gradcache.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedTokenizerBase

from lmplatform.config.loader import ConfigError
from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.pairs import pair_datasets, read_pairs
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.biencoder.group_batches import group_aware_data
from lmplatform.objectives.gradcache import Inputs, cached_info_nce
from lmplatform.objectives.infonce import (
    InfoNCEOutput,
    Temperature,
    info_nce,
    temperature_from_config,
    temperature_learning_rates,
)
from lmplatform.objectives.pair_data import prepared_pairs
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.collate import pad_multiple
from lmplatform.train.recipe import Batch, PreparedData, TrainingRecipe, WeightedMetrics

Evaluate = Callable[[Encoder, Iterable[Batch], int], WeightedMetrics]  # TrainingRecipe.evaluate


def _texts(column: np.ndarray) -> list[str]:
    return [str(t) for t in column]


class QueryDocumentCollator:
    """Pairs -> query_*, document_* and (when present) negative_* token tensors."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int, max_hard_negatives: int = 0):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.max_hard_negatives = max_hard_negatives

    def _encode(self, prefix: str, texts: Sequence[str]) -> Batch:
        features = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                                  pad_to_multiple_of=pad_multiple(), return_tensors="pt")
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


def inputs(batch: Batch, prefix: str) -> Optional[Inputs]:
    """The encoder's inputs of one kind of text (query, document, negative); None when the batch has none."""
    if f"{prefix}_input_ids" not in batch:
        return None
    return {"input_ids": batch[f"{prefix}_input_ids"], "attention_mask": batch[f"{prefix}_attention_mask"]}


def embed(model: Encoder, batch: Batch, prefix: str) -> Optional[torch.Tensor]:
    texts = inputs(batch, prefix)
    return None if texts is None else model(**texts)


def embed_together(model: Encoder, batch: Batch, prefixes: Sequence[str]) -> list[Optional[torch.Tensor]]:
    """Each kind of text's embeddings (None where the batch has none), from one forward pass over all of
    them padded to the longest. Padding is masked, so each embedding is the one a separate pass gives."""
    parts = [inputs(batch, prefix) for prefix in prefixes]
    present = [part for part in parts if part is not None]
    length = max(part["input_ids"].shape[1] for part in present)
    # The id under a masked position reaches neither the other tokens nor the pooled vector: 0 will do.
    joined = {name: torch.cat([F.pad(part[name], (0, length - part[name].shape[1])) for part in present])
              for name in ("input_ids", "attention_mask")}
    embeddings = iter(model(**joined).split([part["input_ids"].shape[0] for part in present]))
    return [None if part is None else next(embeddings) for part in parts]


class BiencoderObjective(nn.Module):
    """uses_hard_negatives: the data has a hard-negative field. Then every step passes a (possibly
    empty) negatives tensor, so all workers enter the same collectives even when only some of
    their batches hold hard negatives.

    mini_batch_size: compute the loss with GradCache, embedding that many texts at a time (training
    only; without autograd, as under evaluation, the plain loss is the same and cheaper).

    one_pass: embed queries, documents and negatives in one forward pass rather than one per kind. A GPU
    step of a small encoder is bound by how fast the host queues kernels, and one pass queues half as many;
    on a CPU the arithmetic bounds it, and padding short queries to the documents' length would cost
    compute. None: one pass where the batch is off the CPU."""

    def __init__(self, temperature: Temperature, symmetric: bool = False, gather: bool = True,
                 uses_hard_negatives: bool = False, mini_batch_size: Optional[int] = None,
                 one_pass: Optional[bool] = None):
        super().__init__()
        self.temperature = temperature
        self.symmetric = symmetric
        self.gather = gather
        self.uses_hard_negatives = uses_hard_negatives
        self.mini_batch_size = mini_batch_size
        self.one_pass = one_pass

    def forward(self, model: Encoder, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.mini_batch_size is not None and torch.is_grad_enabled():
            out = self._cached_loss(model, batch)
        else:
            out = self._loss(model, batch)
        # Detached 0-dim tensors: the loop reads them at logging time, not every micro-step.
        metrics = out.metrics("ranking_") | {"temperature": self.temperature().detach()}
        return out.loss, metrics

    def _loss(self, model: Encoder, batch: Batch) -> InfoNCEOutput:
        one_pass = self.one_pass if self.one_pass is not None else batch["query_input_ids"].device.type != "cpu"
        if one_pass:
            queries, documents, negatives = embed_together(model, batch, ("query", "document", "negative"))
        else:
            queries, documents = embed(model, batch, "query"), embed(model, batch, "document")
            negatives = embed(model, batch, "negative")
        if negatives is None and self.uses_hard_negatives:
            negatives = documents.new_zeros((0, documents.shape[1]))
        return info_nce(
            queries, documents, self.temperature(),
            symmetric=self.symmetric, hard_negatives=negatives, gather=self.gather,
        )

    def _cached_loss(self, model: Encoder, batch: Batch) -> InfoNCEOutput:
        negatives = inputs(batch, "negative")
        if negatives is None and self.uses_hard_negatives:  # no rows: an empty negatives tensor, as in `_loss`
            negatives = {k: v[:0] for k, v in inputs(batch, "document").items()}
        return cached_info_nce(
            model, inputs(batch, "query"), inputs(batch, "document"), self.temperature(), self.mini_batch_size,
            symmetric=self.symmetric, hard_negatives=negatives, gather=self.gather,
        )


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


def prepare_data(cfg: RunConfig) -> PreparedData:
    pairs = read_pairs(cfg.data)
    if cfg.objective.group_aware_batches:
        return group_aware_data(pairs, cfg)
    return prepared_pairs(pairs, pair_datasets(pairs), len(pairs.train))


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The pairs' rows per split, read in this process."""
    if cfg.objective.group_aware_batches:
        raise ConfigError("objective.group_aware_batches: the driver plans each rank's batches in Ray Data; "
                          "read without Ray, set it to false")
    pairs = read_pairs(cfg.data)
    return {split: pairs.rows(split) for split in (TRAIN, VALIDATION)}


def save_encoder(trained: Encoder, folder: Path) -> None:
    trained.save_pretrained(folder)


def pair_encoder_recipe(cfg: RunConfig, objective: nn.Module, evaluate: Evaluate,
                        collator: type[QueryDocumentCollator] = QueryDocumentCollator,
                        learning_rates: Optional[dict[str, float]] = None) -> TrainingRecipe:
    """The recipe of an objective that trains one `Encoder` (cfg.model) on query / document / hard-negative
    rows, the bi-encoder's and the distilled bi-encoder's: the trained encoder is what is saved and what
    retrieval validation searches with."""
    model = Encoder.from_pretrained(cfg.model.name_or_path, cfg.model.pooling, cfg.model.max_seq_length)
    return TrainingRecipe(
        model=model,
        objective=objective,
        collate=collator(model.tokenizer, cfg.model.max_seq_length, cfg.objective.max_hard_negatives),
        export=save_encoder,
        evaluate=evaluate,
        count_tokens=count_pair_tokens,
        retrieval_view=lambda trained: trained,
        learning_rates=learning_rates or {},
    )


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    objective_cfg = cfg.objective
    temperature = temperature_from_config(objective_cfg)
    objective = BiencoderObjective(
        temperature, objective_cfg.symmetric, objective_cfg.gather_across_workers,
        uses_hard_negatives=cfg.data.hard_negative_field is not None and objective_cfg.max_hard_negatives > 0,
        mini_batch_size=objective_cfg.mini_batch_size,
    )
    return pair_encoder_recipe(cfg, objective, InBatchRetrievalEvaluator(temperature),
                               learning_rates=temperature_learning_rates(objective, temperature, objective_cfg.temperature_lr))
