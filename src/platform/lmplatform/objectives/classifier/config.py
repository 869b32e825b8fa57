"""Config of the classification objective (encoder + MLP head)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from lmplatform.config.base import Section


class ClassifierObjectiveConfig(Section):
    """Multi-class text classification: the text is `data.text_field`, the class is `label_field`."""

    name: Literal["classifier"] = "classifier"
    label_field: str = Field("label", min_length=1, description="Column holding the class (any scalar; compared as text).")
    split_field: Optional[str] = Field(
        None, description="Column naming each row's split (train / dev|validation|val; other values are left out). "
        "Ignored when data.validation_paths is set; when unset, validation is split off train by hash.",
    )
    labels: Optional[list[str]] = Field(
        None, description="Class names in logit order. Default: the sorted distinct labels of the training rows; "
        "rows with other labels are bad rows.",
    )
    freeze_encoder: bool = Field(False, description="Train the head only; the encoder is a fixed feature extractor.")
    head_hidden: int = Field(256, ge=1, description="Width of the head's hidden layer(s).")
    head_depth: int = Field(2, ge=1, le=4, description="Linear layers in the head (2: one hidden layer).")
    head_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    head_lr: Optional[float] = Field(
        None, gt=0.0, le=1.0, description="Learning rate of the head (default optim.lr, shared with the encoder). "
        "A head initialised at random barely moves at an encoder's rate such as 2e-5 over a few hundred steps; "
        "SetFit trains its head at 1e-2 while the encoder takes 2e-5. Warm-up and decay apply to it too.",
    )
    class_weights: Optional[list[float]] = Field(
        None, description="Cross-entropy weight per class, in `labels` order. With class_balance=weighted_loss and "
        "no value, the driver fills in n/(k*n_c) from the training split.",
    )
    class_balance: Literal["none", "weighted_loss", "resample"] = Field(
        "none", description="'weighted_loss': cross-entropy weights n/(k*n_c); "
        "'resample': oversample every class to the largest class's count in the training split.",
    )

    @field_validator("class_weights")
    @classmethod
    def _weights_not_negative(cls, value: Optional[list[float]]) -> Optional[list[float]]:
        if value is not None and any(w < 0 for w in value):
            raise ValueError(f"class weights must be >= 0, got {value}")
        return value
