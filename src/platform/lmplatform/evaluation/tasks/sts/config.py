"""The sts evaluation's config: scored sentence pairs and the encoders whose cosines are compared with them."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.evaluation.tasks.common import EncoderSpec, unique_names


class StsDataset(Section):
    """JSONL sentence pairs with a gold similarity score."""

    name: str = Field(..., min_length=1, description="Label in reports.")
    path: str = Field(..., description="JSONL of scored pairs.")
    sentence1_field: str = "sentence1"
    sentence2_field: str = "sentence2"
    score_field: str = "score"
    scale: Optional[tuple[float, float]] = Field(
        None, description="Gold scale [low, high] (EDRM needs it); null: the min and max of the gold scores read."
    )
    where: Optional[dict[str, Any]] = Field(
        None, description="Keep rows whose fields equal these values (a list value: any of them), e.g. {split: test}."
    )
    fit_path: Optional[str] = Field(
        None, description="Labelled pairs (usually the train split) to fit an isotonic cosine->scale map; adds "
        "edrm_isotonic. Same fields and scale as path."
    )
    fit_where: Optional[dict[str, Any]] = Field(None, description="Row filter for fit_path, like where.")
    limit: Optional[int] = Field(None, ge=2, description="Read only the first N pairs of each file (smoke runs).")

    @model_validator(mode="after")
    def _scale(self) -> "StsDataset":
        if self.scale is not None and not self.scale[1] > self.scale[0]:
            raise ValueError(f"dataset {self.name!r}: scale must be [low, high] with high > low, got {list(self.scale)}")
        return self


class StsTask(Section):
    task: Literal["sts"]
    datasets: list[StsDataset] = Field(..., min_length=1)
    encoders: list[EncoderSpec] = Field(..., min_length=1)
    cosine_range: tuple[float, float] = Field(
        (0.0, 1.0), description="Cosine range mapped linearly onto the gold scale for EDRM (clipped)."
    )

    @model_validator(mode="after")
    def _unique(self) -> "StsTask":
        unique_names("dataset", self.datasets)
        unique_names("encoder", self.encoders)
        return self
