"""Config of the cross-encoder re-ranker objective."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section


class CrossEncoderObjectiveConfig(Section):
    """(query, positive) against its negatives, scored pointwise (BCE) or per group (listwise softmax cross-entropy).

    Negatives: the pairs' own hard negatives (data.hard_negative_field, e.g. a mine stage's output) first, then
    documents drawn at random or mined with a bi-encoder; never a text of the query's duplicate group."""

    name: Literal["cross_encoder"] = "cross_encoder"
    loss: Literal["bce", "listwise"] = Field(
        "bce", description="'bce': each (query, document) labelled 1 or 0 on its own; 'listwise': softmax cross-entropy "
        "of the positive among its group (positive + its negatives), as FlagEmbedding's reranker trains.")
    head_lr: Optional[float] = Field(
        None, gt=0.0, le=1.0, description="Learning rate of the relevance head (the classifier and the backbone's pooler; "
        "default optim.lr). A head initialised at random (training from an encoder such as MiniLM) barely moves at an "
        "encoder's rate such as 2e-5 over a few hundred steps: the loss stays at the label prior. "
        "Warm-up and decay apply to it too.")
    negatives_per_positive: int = Field(3, ge=1, description="Negative documents scored with each (query, positive) pair.")
    negatives: Literal["random", "mined"] = Field(
        "random", description="'random': other documents of the split; 'mined': top-k of miner_model that are not a positive."
    )
    miner_model: Optional[str] = Field(
        None, description="Bi-encoder used to mine negatives: 'default', a folder or models:/name@alias.")
    mining_top_k: int = Field(10, ge=1, description="Mined negatives are drawn from this many top-ranked non-positive documents.")
    use_hard_negatives: bool = Field(True, description="Put the pairs' own hard negatives (data.hard_negative_field) first.")
    seed: int = Field(0, description="Seeds the choice of negatives (drawn once, on the driver).")

    @model_validator(mode="after")
    def _miner_for_mining(self) -> "CrossEncoderObjectiveConfig":
        if self.negatives == "mined" and not self.miner_model:
            raise ValueError("negatives='mined' needs miner_model (a bi-encoder: 'default', a folder or models:/name@alias)")
        if self.negatives == "mined" and self.mining_top_k < self.negatives_per_positive:
            raise ValueError(f"mining_top_k ({self.mining_top_k}) must be >= "
                             f"negatives_per_positive ({self.negatives_per_positive})")
        return self
