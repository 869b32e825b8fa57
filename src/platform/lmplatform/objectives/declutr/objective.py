"""DeCLUTR: contrastive learning of text representations from spans of the same document.

Per document, `DeclutrSpanSampler` draws A_N anchor spans with lengths from
Beta(4, 2) and, per anchor, P positive spans with lengths from Beta(2, 4), both
scaled to [min_span, max_span]. A positive starts anywhere from "ends where the
anchor starts" to "starts where the anchor ends", so it may be adjacent to the
anchor, overlap it or lie inside it (Giorgi et al., 2021). The loss is a symmetric
InfoNCE over the batch (every other span's key is a negative) plus MLM on the
anchors, both through the same `MaskedLanguageModel` backbone.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from lmplatform.models.pooling import pool
from lmplatform.objectives.infonce import InfoNCEOutput, Temperature, info_nce
from lmplatform.objectives.masking import DynamicMasker
from lmplatform.objectives.mlm import MaskedLanguageModel
from lmplatform.train.recipe import Batch, WeightedMetrics

Span = tuple[int, int]  # [start, end) in the document's token ids


@dataclass(frozen=True)
class DocumentSpans:
    anchors: list[Span]
    positives: list[list[Span]]  # positives[i] belong to anchors[i]


class DeclutrSpanSampler:
    def __init__(self, num_anchors: int = 2, num_positives: int = 1, min_span: int = 32, max_span: int = 512):
        if not 1 <= min_span <= max_span:
            raise ValueError(f"need 1 <= min_span <= max_span, got {min_span} and {max_span}")
        self.num_anchors = num_anchors
        self.num_positives = num_positives
        self.min_span = min_span
        self.max_span = max_span

    @property
    def min_document_tokens(self) -> int:
        """Shorter documents cannot be sampled (the DeCLUTR paper's 2·A_N·max_span rule)."""
        return 2 * self.num_anchors * self.max_span

    def can_sample(self, num_tokens: int) -> bool:
        return num_tokens >= self.min_document_tokens

    def _length(self, rng: np.random.Generator, a: float, b: float) -> int:
        return int(np.floor(rng.beta(a, b) * (self.max_span - self.min_span + 1))) + self.min_span

    def anchor_length(self, rng: np.random.Generator) -> int:
        return min(self._length(rng, 4.0, 2.0), self.max_span)

    def positive_length(self, rng: np.random.Generator) -> int:
        return min(self._length(rng, 2.0, 4.0), self.max_span)

    def sample(self, num_tokens: int, rng: np.random.Generator) -> DocumentSpans:
        if not self.can_sample(num_tokens):
            raise ValueError(f"a document of {num_tokens} tokens is under the minimum of {self.min_document_tokens}")
        anchors, positives = [], []
        for _ in range(self.num_anchors):
            length = self.anchor_length(rng)
            start = int(rng.integers(0, num_tokens - length + 1))
            anchors.append((start, start + length))
            own = []
            for _ in range(self.num_positives):
                p_length = self.positive_length(rng)
                low = max(0, start - p_length)
                high = min(start + length, num_tokens - p_length)
                p_start = int(rng.integers(low, high + 1))
                own.append((p_start, p_start + p_length))
            positives.append(own)
        return DocumentSpans(anchors, positives)


@dataclass
class SpanCounts:
    """How many documents of a set can be sampled for one max_span (the span report row)."""

    max_span: int
    min_tokens: int
    kept: int
    dropped: int

    @property
    def dropped_fraction(self) -> float:
        total = self.kept + self.dropped
        return self.dropped / total if total else 0.0


def count_sampleable(token_lengths: Sequence[int], num_anchors: int, max_span: int) -> SpanCounts:
    lengths = np.asarray(token_lengths, dtype=np.int64)
    minimum = 2 * num_anchors * max_span
    kept = int((lengths >= minimum).sum())
    return SpanCounts(max_span, minimum, kept, int(len(lengths) - kept))


class DeclutrCollator:
    """Texts -> anchor and positive spans as model inputs, sampled with a seeded RNG on the worker.

    Output: `input_ids`/`attention_mask` [n_anchors + n_anchors*P, L] with every
    anchor first, then the positives grouped by anchor; each span is wrapped in the
    tokenizer's special tokens. Documents too short to sample are skipped and
    counted in `dropped` (prepare_data already filtered them; this guards the rest).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, sampler: DeclutrSpanSampler, seed: int = 0, column: str = "text"):
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.seed = seed
        self.column = column
        self.dropped = 0
        # The special tokens the tokenizer puts around one text ([CLS] ... [SEP], <s> ... </s>).
        around = tokenizer("", add_special_tokens=True)["input_ids"]
        self.prefix, self.suffix = list(around[:1]), list(around[1:])
        self._rng: Optional[np.random.Generator] = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            # Created on first use, on the worker, so each rank draws different spans.
            import torch.distributed as dist

            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            self._rng = np.random.default_rng([self.seed, rank])
        return self._rng

    def state_dict(self) -> dict[str, Any]:
        """The span sampler's generator, checkpointed per rank: a resumed run draws the spans the
        uninterrupted run would have drawn for the same batches."""
        return {"rng": self.rng.bit_generator.state, "dropped": self.dropped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]  # default_rng's PCG64, as in `rng`
        self._rng = rng
        self.dropped = int(state["dropped"])

    @contextlib.contextmanager
    def fixed_spans(self, seed: int) -> Iterator[None]:
        """Draw from a fresh RNG with this seed inside the block (the same validation spans every time)."""
        saved = self.rng
        self._rng = np.random.default_rng([self.seed, seed, 7])
        try:
            yield
        finally:
            self._rng = saved

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        return self.collate_texts([str(t) for t in batch[self.column]])

    def collate_texts(self, texts: Sequence[str]) -> Batch:
        ids = self.tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
        anchors: list[list[int]] = []
        positives: list[list[int]] = []
        for doc in ids:
            if not self.sampler.can_sample(len(doc)):
                self.dropped += 1
                continue
            spans = self.sampler.sample(len(doc), self.rng)
            anchors.extend(doc[s:e] for s, e in spans.anchors)
            positives.extend(doc[s:e] for own in spans.positives for s, e in own)
        if not anchors:
            raise ValueError(f"no document in this batch of {len(texts)} has {self.sampler.min_document_tokens}+ tokens")
        wrapped = [self.prefix + list(span) + self.suffix for span in anchors + positives]
        padded = self.tokenizer.pad({"input_ids": wrapped}, padding=True, pad_to_multiple_of=8, return_tensors="pt")
        return {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"]}


class DeclutrObjective(nn.Module):
    """mlm_weight · MLM(anchors) + contrastive_weight · symmetric InfoNCE(anchors, mean of their positives)."""

    def __init__(self, masker: DynamicMasker, temperature: Temperature, num_positives: int = 1,
                 mlm_weight: float = 1.0, contrastive_weight: float = 1.0):
        super().__init__()
        self.masker = masker
        self.temperature = temperature
        self.num_positives = num_positives
        self.mlm_weight = mlm_weight
        self.contrastive_weight = contrastive_weight

    def split(self, batch: Batch) -> int:
        rows = batch["input_ids"].shape[0]
        if rows % (1 + self.num_positives):
            raise ValueError(f"{rows} spans is not anchors x (1 + {self.num_positives} positives)")
        return rows // (1 + self.num_positives)

    def contrastive(self, model: MaskedLanguageModel, batch: Batch, gather: bool = True) -> InfoNCEOutput:
        n_anchors = self.split(batch)
        mask = batch["attention_mask"]
        vectors = pool(model.hidden_states(batch["input_ids"], mask), mask, "mean")
        anchors = vectors[:n_anchors]
        keys = vectors[n_anchors:].view(n_anchors, self.num_positives, -1).mean(1)
        return info_nce(anchors, keys, self.temperature(), symmetric=True, gather=gather)

    def mlm(self, model: MaskedLanguageModel, batch: Batch, generator: Optional[torch.Generator] = None) -> dict[str, torch.Tensor]:
        n_anchors = self.split(batch)
        ids, mask = batch["input_ids"][:n_anchors], batch["attention_mask"][:n_anchors]
        inputs, labels = self.masker(ids, mask, None, generator)
        return model(input_ids=inputs, attention_mask=mask, labels=labels)

    def forward(self, model: MaskedLanguageModel, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        nce = self.contrastive(model, batch)
        loss = self.contrastive_weight * nce.loss
        metrics = {
            "contrastive_loss": float(nce.loss.detach()),
            "inbatch_accuracy": nce.accuracy,
            "temperature": float(self.temperature().detach()),
        }
        if self.mlm_weight > 0:
            out = self.mlm(model, batch)
            loss = loss + self.mlm_weight * out["loss"]
            metrics["mlm_loss"] = float(out["loss"].detach())
            metrics["mlm_accuracy"] = float(out["correct"]) / max(int(out["n_masked"]), 1)
        return loss, metrics


class DeclutrEvaluator:
    """Held-out contrastive loss/accuracy and anchor MLM loss, on fixed spans and a fixed masking seed.

    The batches are collated lazily inside `fixed_spans`, so they must be a lazy iterable of this
    collator's output (the loop's validation batches are). The loop sets eval and inference mode.
    """

    def __init__(self, objective: DeclutrObjective, collator: DeclutrCollator, seed: int = 1234):
        self.objective = objective
        self.collator = collator
        self.seed = seed

    def __call__(self, model: MaskedLanguageModel, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        generator = torch.Generator().manual_seed(self.seed + rank)
        sums = {"contrastive_loss": 0.0, "inbatch_accuracy": 0.0, "mlm_loss": 0.0, "mlm_accuracy": 0.0}
        anchors = masked = 0.0
        with self.collator.fixed_spans(self.seed + rank):
            for batch in batches:
                n = float(self.objective.split(batch))
                nce = self.objective.contrastive(model, batch, gather=False)
                sums["contrastive_loss"] += float(nce.loss) * n
                sums["inbatch_accuracy"] += nce.accuracy * n
                anchors += n
                out = self.objective.mlm(model, batch, generator)
                k = float(out["n_masked"])
                sums["mlm_loss"] += float(out["loss"]) * k
                sums["mlm_accuracy"] += float(out["correct"])
                masked += k
        weights = {"contrastive_loss": anchors, "inbatch_accuracy": anchors, "mlm_loss": masked, "mlm_accuracy": masked}
        return {name: (value, weights[name]) for name, value in sums.items()}
