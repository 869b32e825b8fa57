"""Config of the bi-encoder objective: multiple-negatives ranking on (query, document) pairs."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lmplatform.config.base import Section


class BiencoderObjectiveConfig(Section):
    """In-batch negatives InfoNCE (multiple-negatives ranking); the pairs' fields are named in `data`."""

    name: Literal["biencoder"] = "biencoder"
    temperature: float = Field(0.05, gt=0.0, le=1.0, description="Softmax temperature; the 'scale' of sentence-transformers is 1/temperature (0.05 = scale 20).")
    learnable_temperature: bool = Field(False, description="Learn log(temperature), clamped to [min_temperature, max_temperature].")
    min_temperature: float = Field(0.01, gt=0.0, le=1.0)
    max_temperature: float = Field(1.0, gt=0.0, le=1.0)
    temperature_lr: float = Field(
        1e-2, gt=0.0, le=1.0,
        description="Learning rate of log(temperature) when learnable (its own AdamW group, no weight decay, the run's schedule). "
                    "Adam moves a parameter by about its lr per step whatever the gradient's scale, so this is log tau's "
                    "relative change per step: 1e-2 lets tau travel ~e-fold over a few hundred steps; at the encoder's lr "
                    "(2e-5) it would move under 1%.",
    )
    symmetric: bool = Field(False, description="Also rank queries for each document and average both losses.")
    max_hard_negatives: int = Field(1, ge=0, description="Hard negatives used per pair (from data.hard_negative_field); 0 ignores them.")
    gather_across_workers: bool = Field(True, description="Negatives from the global batch (all workers), not only the local one.")

    @model_validator(mode="after")
    def _temperature_in_range(self) -> "BiencoderObjectiveConfig":
        if not self.min_temperature <= self.temperature <= self.max_temperature:
            raise ValueError(
                f"temperature {self.temperature} must lie in [min_temperature, max_temperature] "
                f"= [{self.min_temperature}, {self.max_temperature}]"
            )
        return self
