"""Config of the bi-encoder objective: multiple-negatives ranking on (query, document) pairs."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.objectives.temperature_config import (
    LEARNABLE_DESCRIPTION,
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    TEMPERATURE_LR,
    check_temperature_range,
)


class BiencoderObjectiveConfig(Section):
    """In-batch negatives InfoNCE (multiple-negatives ranking); the pairs' fields are named in `data`."""

    name: Literal["biencoder"] = "biencoder"
    temperature: float = Field(
        0.05, gt=0.0, le=1.0,
        description="Softmax temperature; the 'scale' of sentence-transformers is 1/temperature (0.05 = scale 20).")
    learnable_temperature: bool = Field(False, description=LEARNABLE_DESCRIPTION)
    min_temperature: float = MIN_TEMPERATURE
    max_temperature: float = MAX_TEMPERATURE
    temperature_lr: float = TEMPERATURE_LR
    group_aware_batches: bool = Field(
        False, description="Compose every global batch (optim.batch_size x scaling.num_workers) so that it never holds two "
        "pairs of one duplicate group (data.group_field, or the pairs' duplicate links) or one text twice: no false "
        "in-batch negatives. Rows are ordered on the driver per epoch; each worker takes its slice of each global batch.")
    symmetric: bool = Field(False, description="Also rank queries for each document and average both losses.")
    max_hard_negatives: int = Field(
        1, ge=0, description="Hard negatives used per pair (from data.hard_negative_field); 0 ignores them.")
    gather_across_workers: bool = Field(
        True, description="Negatives from the global batch (all workers), not only the local one.")
    mini_batch_size: Optional[int] = Field(
        None, ge=1, description="GradCache (cached InfoNCE): embed texts this many at a time, so activation memory follows "
        "this size while the in-batch negatives still come from the whole optim.batch_size; the same loss and gradients, "
        "for one extra forward pass. None embeds the whole batch at once.")

    @model_validator(mode="after")
    def _temperature_in_range(self) -> "BiencoderObjectiveConfig":
        check_temperature_range(self.temperature, self.min_temperature, self.max_temperature)
        return self
