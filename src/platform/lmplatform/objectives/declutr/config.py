"""Config of the DeCLUTR objective: span-sampling InfoNCE plus MLM on the same batch."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.objectives.mlm.config import MLMObjectiveConfig
from lmplatform.objectives.temperature_config import (
    LEARNABLE_DESCRIPTION,
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    TEMPERATURE_LR,
    check_temperature_range,
)

_MLM = MLMObjectiveConfig.model_fields


class DeclutrObjectiveConfig(Section):
    """DeCLUTR (Giorgi et al., 2021): anchors and positives sampled from the same document."""

    name: Literal["declutr"] = "declutr"
    num_anchors: int = Field(2, ge=1, description="Anchor spans per document (A_N).")
    num_positives: int = Field(1, ge=1, description="Positive spans per anchor (P); several are averaged into one key.")
    min_span: int = Field(8, ge=1, description="Shortest span in tokens (special tokens not counted).")
    max_span: int = Field(32, ge=1, description="Longest span in tokens; "
                          "documents under 2*num_anchors*max_span tokens are dropped. Must fit model.max_seq_length - 2.")
    temperature: float = Field(0.05, gt=0.0, le=1.0, description="Initial (or fixed) InfoNCE temperature.")
    learnable_temperature: bool = Field(True, description=LEARNABLE_DESCRIPTION)
    min_temperature: float = MIN_TEMPERATURE
    max_temperature: float = MAX_TEMPERATURE
    temperature_lr: float = TEMPERATURE_LR
    mlm_weight: float = Field(1.0, ge=0.0, description="Weight of the MLM loss on the anchor spans.")
    contrastive_weight: float = Field(1.0, ge=0.0, description="Weight of the symmetric InfoNCE loss.")
    # Masking of the anchors, with the MLM objective's fields and defaults.
    mask_probability: float = _MLM["mask_probability"]
    replace_with_mask: float = _MLM["replace_with_mask"]
    replace_with_random: float = _MLM["replace_with_random"]
    projection: Literal["auto", "masked", "full"] = _MLM["projection"]
    seed: int = Field(0, description="Seeds span sampling (combined with the worker rank).")

    @model_validator(mode="after")
    def _consistent(self) -> "DeclutrObjectiveConfig":
        if self.min_span > self.max_span:
            raise ValueError(f"min_span ({self.min_span}) must be <= max_span ({self.max_span})")
        check_temperature_range(self.temperature, self.min_temperature, self.max_temperature)
        if self.mlm_weight == 0 and self.contrastive_weight == 0:
            raise ValueError("mlm_weight and contrastive_weight cannot both be 0")
        MLMObjectiveConfig(  # the masking shares follow the MLM objective's rules
            mask_probability=self.mask_probability,
            replace_with_mask=self.replace_with_mask,
            replace_with_random=self.replace_with_random,
        )
        return self

    @property
    def min_document_tokens(self) -> int:
        return 2 * self.num_anchors * self.max_span
