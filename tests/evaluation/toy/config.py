"""The toy evaluation's task config: text files, encoders, and the vector length they should have."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from lmplatform.config.base import Section
from lmplatform.evaluation.tasks.common import EncoderSpec


class ToyTexts(Section):
    name: str = Field(..., min_length=1)
    path: str = Field(..., description="JSONL with a `text` field.")


class ToyNormTask(Section):
    task: Literal["toy_norm"]
    datasets: list[ToyTexts] = Field(..., min_length=1)
    encoders: list[EncoderSpec] = Field(..., min_length=1)
    target_norm: float = Field(1.0, gt=0)
