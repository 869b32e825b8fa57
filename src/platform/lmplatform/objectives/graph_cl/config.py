"""Config of the graph contrastive objective (CLGS / CLDR / CLNER) on ADE-format data."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section


class GraphCLObjectiveConfig(Section):
    """Impose entity-relation structure on token embeddings. Data: ADE-format JSONL in data.train_paths."""

    name: Literal["graph_cl"] = "graph_cl"
    variant: Literal["clgs", "cldr", "clner"] = Field(
        "clgs", description="clgs: sentence <-> relation graph; cldr: relation <-> token pair; "
        "clner: supervised contrastive over entity tags."
    )
    temperature: float = Field(0.1, gt=0.0, le=10.0, description="Softmax temperature tau of every loss.")
    negatives_per_sentence: int = Field(3, ge=1, le=64, description="Hard-negative graphs Z per sentence (clgs, cldr).")
    entity_pooling: Literal["last", "mean"] = Field(
        "last", description="An entity is its last word (the paper) or the mean of its words.")
    word_pooling: Literal["first", "mean"] = Field(
        "first", description="A word is its first sub-word or the mean of its sub-words.")
    graph_pooling: Literal["mean", "max"] = Field("mean", description="How CLGS pools the GCN node outputs into a graph vector.")
    sentence_pooling: Literal["mean", "max", "cls"] = Field("mean", description="How CLGS pools the sentence's token vectors.")
    projection: bool = Field(False, description="A learned linear projection on the text side before the loss.")
    pair_self_weight: float = Field(0.8, ge=0.0, le=1.0, description="lambda of the CLDR 2-node adjacency [[l, 1-l], [1-l, l]].")
    in_batch_negatives: bool = Field(True, description="CLGS: the other sentences' graphs in the batch are negatives too.")
    samples_per_tag: int = Field(16, ge=2, description="CLNER: words sampled per BIO tag from each batch.")
    frozen_layers: Optional[int] = Field(
        None, ge=0, description="First encoder layers (and embeddings) kept frozen; default half the layers.")
    folds_file: Optional[str] = Field(
        None, description="folds.json ({split_k: {train, test}}); with `fold`, train on that fold's train ids only.")
    fold: Optional[int] = Field(None, ge=0, description="Fold whose training ids are used (its test ids are never seen).")

    @model_validator(mode="after")
    def _fold_needs_file(self) -> "GraphCLObjectiveConfig":
        if (self.fold is None) != (self.folds_file is None):
            raise ValueError("set both objective.folds_file and objective.fold, or neither")
        return self
