"""Masked-language-model continued pretraining.

`MaskedLanguageModel` runs the vocabulary projection only at masked positions:
on MiniLM the 30k-row output layer costs about as much as the encoder, so
projecting ~15% of positions instead of all of them roughly halves a step.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from lmplatform.models.encoder import write_encoder_config
from lmplatform.objectives.masking import IGNORE_INDEX, DynamicMasker

logger = logging.getLogger(__name__)

# The prediction head of each architecture family, called on hidden states.
_HEAD_ATTRIBUTES = ("cls", "lm_head", "generator_lm_head")


def _load_masked_lm(path: str | Path) -> tuple[PreTrainedModel, list[str]]:
    """The model with its MLM head, and the head tensors the checkpoint lacks (initialised at random)."""
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # callers give their own account of the head
    try:
        mlm, info = AutoModelForMaskedLM.from_pretrained(str(path), output_loading_info=True)
    finally:
        hf_logging.set_verbosity(previous)
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(mlm.base_model_prefix + "."))
    return mlm, missing


def untrained_mlm_head(path: str | Path) -> list[str]:
    """The MLM head tensors a model folder does not hold: [] when its head was trained (saved with it).

    A sentence encoder such as the packaged MiniLM ships its backbone only, so every head tensor
    but the decoder tied to the input embeddings is new.
    """
    return _load_masked_lm(path)[1]


class MaskedLanguageModel(nn.Module):
    def __init__(self, mlm: PreTrainedModel, projection: str = "masked", untrained_head: tuple[str, ...] = ()):
        super().__init__()
        self.mlm = mlm
        self.head = next((getattr(mlm, a) for a in _HEAD_ATTRIBUTES if hasattr(mlm, a)), None)
        if projection == "masked" and self.head is None:
            logger.warning("%s: unknown MLM head layout; projecting the full sequence", type(mlm).__name__)
            projection = "full"
        self.projection = projection
        self.untrained_head = tuple(untrained_head)  # head tensors freshly initialised at load

    @classmethod
    def from_pretrained(cls, path: str | Path, projection: str = "masked") -> "MaskedLanguageModel":
        mlm, missing = _load_masked_lm(path)
        if missing:
            tied = mlm.get_output_embeddings() is not None and (
                mlm.get_output_embeddings().weight is mlm.get_input_embeddings().weight
            )
            logger.warning(
                "%s has no MLM head (%d head tensors missing): initialised a new head%s",
                path,
                len(missing),
                ", its decoder tied to the input embeddings" if tied else "",
            )
        return cls(mlm, projection, tuple(missing))

    @property
    def backbone(self) -> PreTrainedModel:
        return self.mlm.base_model

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def masked_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [n_masked, vocab], targets [n_masked]) for the positions that have a label."""
        selected = labels != IGNORE_INDEX
        if self.projection == "full":
            logits = self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits
            return logits[selected], labels[selected]
        hidden = self.hidden_states(input_ids, attention_mask)
        return self.head(hidden[selected]), labels[selected]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits, targets = self.masked_logits(input_ids, attention_mask, labels)
        loss = F.cross_entropy(logits.float(), targets)
        correct = (logits.argmax(-1) == targets).sum()
        return {"loss": loss, "n_masked": torch.tensor(targets.numel()), "correct": correct}

    def save_pretrained(self, path: str | Path, tokenizer: PreTrainedTokenizerBase, pooling: str, max_seq_length: int) -> Path:
        path = Path(path)
        self.mlm.save_pretrained(str(path))
        tokenizer.save_pretrained(str(path))
        write_encoder_config(path, pooling, max_seq_length)
        return path


class MLMObjective(nn.Module):
    """Mask the batch, predict the masked tokens; loss only on masked positions."""

    def __init__(self, masker: DynamicMasker):
        super().__init__()
        self.masker = masker

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        inputs, labels = self.masker(batch["input_ids"], batch["attention_mask"], batch.get("word_ids"))
        out = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)
        n = max(int(out["n_masked"]), 1)
        return out["loss"], {"mlm_loss": float(out["loss"].detach()), "mlm_accuracy": float(out["correct"]) / n}


class MLMEvaluator:
    """Held-out masked-LM loss with a fixed masking seed, plus pseudo-perplexity.

    Returns weighted sums {name: (sum, weight)} so distributed workers can be reduced.
    The caller sets eval and inference mode and places the batches (the training loop does).
    Pseudo-perplexity (Salazar et al., 2020) masks each token of a sentence in turn;
    it costs one forward per token, so it runs on the first `pppl_sentences` only.
    """

    def __init__(self, masker: DynamicMasker, seed: int = 1234, pppl_sentences: int = 16, pppl_chunk: int = 64):
        self.masker = masker
        self.seed = seed
        self.pppl_sentences = pppl_sentences
        self.pppl_chunk = pppl_chunk

    def __call__(self, model: MaskedLanguageModel, batches: Iterable[dict[str, torch.Tensor]], rank: int = 0) -> dict[str, tuple[float, float]]:
        generator = torch.Generator().manual_seed(self.seed + rank)
        loss_sum = correct = masked = 0.0
        pppl_nll = pppl_tokens = 0.0
        pppl_left = self.pppl_sentences
        for batch in batches:
            inputs, labels = self.masker(batch["input_ids"], batch["attention_mask"], batch.get("word_ids"), generator)
            out = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)
            n = float(out["n_masked"])
            loss_sum += float(out["loss"]) * n
            correct += float(out["correct"])
            masked += n
            if pppl_left > 0:
                take = min(pppl_left, batch["input_ids"].shape[0])
                nll, tokens = self._pseudo_log_likelihood(model, batch["input_ids"][:take], batch["attention_mask"][:take])
                pppl_nll += nll
                pppl_tokens += tokens
                pppl_left -= take
        metrics = {"mlm_loss": (loss_sum, masked), "mlm_accuracy": (correct, masked)}
        if self.pppl_sentences:
            metrics["pseudo_log_likelihood"] = (pppl_nll, pppl_tokens)
        return metrics

    def _pseudo_log_likelihood(self, model: MaskedLanguageModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[float, float]:
        nll, tokens = 0.0, 0
        allowed = self.masker.maskable(input_ids, attention_mask)
        for row in range(input_ids.shape[0]):
            positions = allowed[row].nonzero().squeeze(1)
            length = int(attention_mask[row].sum())
            ids = input_ids[row, :length]
            for start in range(0, len(positions), self.pppl_chunk):
                chunk = positions[start : start + self.pppl_chunk]
                copies = ids.unsqueeze(0).repeat(len(chunk), 1)
                labels = torch.full_like(copies, IGNORE_INDEX)
                rows = torch.arange(len(chunk), device=copies.device)
                labels[rows, chunk] = copies[rows, chunk]
                copies[rows, chunk] = self.masker.mask_token_id
                logits, targets = model.masked_logits(copies, torch.ones_like(copies), labels)
                nll += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
                tokens += len(chunk)
        return nll, float(tokens)

    @staticmethod
    def summarize(metrics: dict[str, float]) -> dict[str, float]:
        out = dict(metrics)
        if "mlm_loss" in out:
            out["perplexity"] = math.exp(min(out["mlm_loss"], 50.0))
        if "pseudo_log_likelihood" in out:
            out["pseudo_perplexity"] = math.exp(min(out.pop("pseudo_log_likelihood"), 50.0))
        return out
