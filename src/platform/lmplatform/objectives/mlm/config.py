"""Config of the masked-language-modelling objective."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lmplatform.config.base import Section


class MLMObjectiveConfig(Section):
    """RoBERTa-style dynamic masking, re-drawn for every batch."""

    name: Literal["mlm"] = "mlm"
    mask_probability: float = Field(0.15, gt=0.0, lt=1.0)
    replace_with_mask: float = Field(0.8, ge=0.0, le=1.0, description="Share of selected tokens set to [MASK].")
    replace_with_random: float = Field(0.1, ge=0.0, le=1.0, description="Share of selected tokens set to a random token.")
    whole_word: bool = Field(False, description="Mask every sub-word of a selected word together.")
    projection: Literal["auto", "masked", "full"] = Field(
        "auto", description="'masked' runs the vocabulary projection only at masked positions (about 2x faster on "
        "MiniLM on CPU); 'full' projects every position, so the host never waits to learn how many were masked "
        "(faster on a GPU, where a step is bound by queueing kernels); 'auto' takes 'full' on a GPU while a batch's "
        "fp32 logits stay within 2 GiB, else 'masked'."
    )
    freeze_encoder: bool = Field(
        False, description="Train the MLM head alone (a head warm-up for an encoder shipped without one, e.g. the "
        "packaged MiniLM): the encoder, and the input embeddings the head's decoder is tied to, keep their weights "
        "and run in eval mode; the saved folder holds the trained head for later stages (init_from).")
    pseudo_perplexity_sentences: int = Field(
        16, ge=0, description="Validation sentences scored by pseudo-perplexity (one forward per token); 0 turns it off."
    )

    @model_validator(mode="after")
    def _shares_fit(self) -> "MLMObjectiveConfig":
        if self.replace_with_mask + self.replace_with_random > 1.0:
            raise ValueError(
                f"replace_with_mask + replace_with_random must be <= 1, got "
                f"{self.replace_with_mask} + {self.replace_with_random}"
            )
        return self
