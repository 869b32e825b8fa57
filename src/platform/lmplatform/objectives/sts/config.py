"""Config of the STS fine-tuning objective (scored sentence pairs)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section


class STSObjectiveConfig(Section):
    """Fine-tune the encoder so cos(sentence1, sentence2) follows a gold similarity score."""

    name: Literal["sts"] = "sts"
    sentence1_field: str = Field("sentence1", min_length=1)
    sentence2_field: str = Field("sentence2", min_length=1)
    score_field: str = Field("score", min_length=1, description="Gold similarity (e.g. 'relatedness_score' for SICK).")
    scale: tuple[float, float] = Field((0.0, 5.0), description="Gold score range; rows outside it are bad rows.")
    loss: Literal["cosent", "cosine_mse"] = Field(
        "cosent", description="'cosent': ranking loss over all pairs of pairs in the batch (Su 2022); "
        "'cosine_mse': MSE between cosine and the gold score rescaled to [0, 1].",
    )
    cosent_scale: float = Field(20.0, gt=0.0, description="CoSENT's lambda (inverse temperature).")
    split_field: Optional[str] = Field(
        None, description="Column naming each row's split (train / dev|validation|val; others left out).",
    )

    @model_validator(mode="after")
    def _scale_is_a_range(self) -> "STSObjectiveConfig":
        if not self.scale[1] > self.scale[0]:
            raise ValueError(f"scale must be [low, high] with high > low, got {list(self.scale)}")
        return self
