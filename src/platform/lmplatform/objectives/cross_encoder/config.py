"""Config of the cross-encoder re-ranker objective."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section


class CrossEncoderObjectiveConfig(Section):
    """BCE on (query, positive) against negatives drawn at random or mined with a bi-encoder."""

    name: Literal["cross_encoder"] = "cross_encoder"
    negatives_per_positive: int = Field(3, ge=1, description="Negative documents scored with each (query, positive) pair.")
    negatives: Literal["random", "mined"] = Field(
        "random", description="'random': other documents of the split; 'mined': top-k of miner_model that are not a positive."
    )
    miner_model: Optional[str] = Field(None, description="Bi-encoder used to mine negatives: 'default', a folder or models:/name@alias.")
    mining_top_k: int = Field(10, ge=1, description="Mined negatives are drawn from this many top-ranked non-positive documents.")
    use_hard_negatives: bool = Field(True, description="Put the pairs' own hard negatives (data.hard_negative_field) first.")
    seed: int = Field(0, description="Seeds the choice of negatives (drawn once, on the driver).")

    @model_validator(mode="after")
    def _miner_for_mining(self) -> "CrossEncoderObjectiveConfig":
        if self.negatives == "mined" and not self.miner_model:
            raise ValueError("negatives='mined' needs miner_model (a bi-encoder: 'default', a folder or models:/name@alias)")
        if self.negatives == "mined" and self.mining_top_k < self.negatives_per_positive:
            raise ValueError(f"mining_top_k ({self.mining_top_k}) must be >= negatives_per_positive ({self.negatives_per_positive})")
        return self
