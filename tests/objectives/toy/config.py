"""Config of the toy objective: torch-free, like every objective's."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from lmplatform.config.base import Section


class ToyNormConfig(Section):
    """Pull the length of every pooled text vector towards `target_norm`."""

    name: Literal["toy_norm"] = "toy_norm"
    target_norm: float = Field(1.0, gt=0.0, description="The length each text vector should have.")
