"""`MaskedLanguageModel`: an encoder with its masked-LM head (the MLM and DeCLUTR objectives, EWC's Fisher).

Where the arithmetic bounds a step (a CPU), it runs the vocabulary projection only at masked positions:
on MiniLM the 30k-row output layer costs about as much as the encoder, so projecting ~15% of positions
instead of all of them roughly halves a step. Picking those positions is a boolean index, whose size only
the device knows: on a GPU the host waits there for the forward pass to finish before it can queue the
rest of the step. A GPU step is bound by queueing kernels, so there every position is projected and the
loss ignores the unmasked ones (`projection="auto"`), as long as the batch's logits stay within
`FULL_PROJECTION_BYTES` (2 GiB in fp32: 4,096 positions x 30,522 words is 0.5 GiB); a larger batch is
bound by arithmetic again and would run out of memory first, so it takes the masked projection.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel, PreTrainedTokenizerBase

from lmplatform.models.encoder_config import write_encoder_config
from lmplatform.models.quiet import quiet_transformers

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # a label the loss skips: the token is not predicted (Hugging Face's convention)

FULL_PROJECTION_BYTES = 2 * 1024**3  # the largest fp32 logits `projection="auto"` projects in full
# The prediction head of each architecture family, called on hidden states.
_HEAD_ATTRIBUTES = ("cls", "lm_head", "generator_lm_head")


def _load_masked_lm(path: str | Path) -> tuple[PreTrainedModel, list[str]]:
    """The model with its MLM head, and the head tensors the checkpoint lacks (initialised at random)."""
    with quiet_transformers():  # callers give their own account of the head
        mlm, info = AutoModelForMaskedLM.from_pretrained(str(path), output_loading_info=True)
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(mlm.base_model_prefix + "."))
    return mlm, missing


def untrained_mlm_head(path: str | Path) -> list[str]:
    """The MLM head tensors a model folder does not hold: [] when its head was trained (saved with it).

    A sentence encoder such as the packaged MiniLM ships its backbone only, so every head tensor
    but the decoder tied to the input embeddings is new.
    """
    return _load_masked_lm(path)[1]


class MaskedLanguageModel(nn.Module):
    def __init__(self, mlm: PreTrainedModel, projection: str = "auto", untrained_head: tuple[str, ...] = ()):
        super().__init__()
        self.mlm = mlm
        self.head = next((getattr(mlm, a) for a in _HEAD_ATTRIBUTES if hasattr(mlm, a)), None)
        if projection != "full" and self.head is None:
            logger.warning("%s: unknown MLM head layout; projecting the full sequence", type(mlm).__name__)
            projection = "full"
        self.projection = projection
        self.untrained_head = tuple(untrained_head)  # head tensors freshly initialised at load
        self.encoder_frozen = False

    def freeze_encoder(self) -> list[str]:
        """Leave only the MLM head trainable; returns the names of the parameters still trained.

        Every parameter outside the head gets requires_grad False, and so does a head tensor shared
        with the encoder: the decoder weight tied to the input embeddings (BERT's layout), so the
        encoder's weights stay exactly as they are. The encoder then runs in eval mode (no dropout)
        and without a graph, as a fixed feature extractor."""
        if self.head is None:
            raise ValueError(f"{type(self.mlm).__name__}: unknown MLM head layout, cannot train the head alone")
        head_ids = {id(p) for p in self.head.parameters()}
        encoder_ids = {id(p) for p in self.backbone.parameters()}
        trained = []
        for name, param in self.named_parameters():  # a tied tensor is listed once, under its first name
            keep = id(param) in head_ids and id(param) not in encoder_ids
            param.requires_grad_(keep)
            if keep:
                trained.append(name)
        self.encoder_frozen = True
        self.backbone.eval()
        return trained

    def train(self, mode: bool = True) -> "MaskedLanguageModel":
        super().train(mode)
        if self.encoder_frozen:
            self.backbone.eval()  # no dropout in a frozen feature extractor
        return self

    @classmethod
    def from_pretrained(cls, path: str | Path, projection: str = "auto") -> "MaskedLanguageModel":
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
        if self.encoder_frozen:
            with torch.no_grad():
                return self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def masked_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [n_masked, vocab], targets [n_masked]) for the positions that have a label."""
        selected = labels != IGNORE_INDEX
        if self.projection == "full":
            return self.all_logits(input_ids, attention_mask)[selected], labels[selected]
        hidden = self.hidden_states(input_ids, attention_mask)
        return self.head(hidden[selected]), labels[selected]

    def projects_every_position(self, input_ids: torch.Tensor) -> bool:
        """Whether `forward` projects every position of this batch (decided from its shape and device alone)."""
        if self.projection != "auto":
            return self.projection == "full"
        logit_bytes = input_ids.numel() * self.mlm.config.vocab_size * 4
        return input_ids.device.type != "cpu" and logit_bytes <= FULL_PROJECTION_BYTES

    def all_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[batch, length, vocab] logits of every position."""
        if self.head is None:
            return self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits
        return self.head(self.hidden_states(input_ids, attention_mask))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        """Mean cross-entropy over the labelled positions, with their count and how many were predicted
        right (0-dim tensors on the device; with every position projected, nothing waits for the device)."""
        if self.projects_every_position(input_ids):
            logits, targets = self.all_logits(input_ids, attention_mask).flatten(0, 1), labels.flatten()
            predicted = targets != IGNORE_INDEX
            loss = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)
            correct = ((logits.argmax(-1) == targets) & predicted).sum()
            return {"loss": loss, "n_masked": predicted.sum(), "correct": correct}
        logits, targets = self.masked_logits(input_ids, attention_mask, labels)
        loss = F.cross_entropy(logits.float(), targets)
        correct = (logits.argmax(-1) == targets).sum()
        # n_masked on the logits' device (a fill, not a host-to-device copy, which would wait for the device)
        n_masked = torch.full((), targets.numel(), dtype=torch.long, device=correct.device)
        return {"loss": loss, "n_masked": n_masked, "correct": correct}

    def save_pretrained(self, path: str | Path, tokenizer: PreTrainedTokenizerBase, pooling: str, max_seq_length: int) -> Path:
        path = Path(path)
        self.mlm.save_pretrained(str(path))
        tokenizer.save_pretrained(str(path))
        write_encoder_config(path, pooling, max_seq_length)
        return path
