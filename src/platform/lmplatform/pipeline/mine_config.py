"""The `mine` stage kind: hard negatives for every pair of a pairs file, mined with the stage's model (`init_from`);
runs in `pipeline/mine.py`."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.schema import DataConfig
from lmplatform.pipeline.spec import StageSpec
from lmplatform.retrieval.settings import DistractorConfig


class MineConfig(Section):
    """A `mine` stage: hard negatives for every pair of `pairs`, mined with the stage's model (`init_from`)
    and written as a JSONL pairs file with a `hard_negatives` list (retrieval/mining.py has the rules)."""

    pairs: DataConfig = Field(..., description="The pairs to mine for; every pair of these files is mined (their "
                              "split is the training stage's business). Fields and cleaning as in a run's `data`.")
    distractors: Optional[DistractorConfig] = Field(
        None, description="Documents that join the pairs' documents as candidates (e.g. the whole report corpus).")
    num_negatives: int = Field(3, ge=1, description="Hard negatives per pair, at most.")
    range_min: int = Field(0, ge=0, description="Skip the first range_min ranks (0-based; the query's group, the query "
                           "and the positive are never ranked): the very top holds the unlabelled duplicates.")
    range_max: int = Field(50, ge=1, description="Candidates ranked at range_max or below are not considered.")
    relative_margin: Optional[float] = Field(
        0.05, ge=0.0, lt=1.0, description="Drop a candidate scoring above positive - |positive| x margin (as "
        "sentence-transformers' mine_hard_negatives); null keeps every candidate of the window.")
    cross_encoder: Optional[str] = Field(
        None, description="A cross-encoder (folder or models:/...) that scores the remaining candidates; those above "
        "max_cross_encoder_score are dropped as likely false negatives.")
    max_cross_encoder_score: float = Field(0.5, ge=0.0, le=1.0, description="Relevance probability above which the "
                                           "cross-encoder calls a candidate a duplicate.")
    batch_size: int = Field(64, ge=1, description="Texts per forward pass when encoding.")
    max_seq_length: Optional[int] = Field(None, ge=8, description="Longer texts are truncated; default: the model's.")
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32", description="Autocast type of the encoding: bf16 is about 1.8x fp32 on CPUs with AVX512-BF16 or AMX; "
        "'auto' takes it where the actor's device has it in hardware. Negatives are chosen by rank, which bf16's "
        "rounding rarely changes (MiniLM on OpenOffice: 99.6% of the top 50 neighbours the same).")
    actors: int = Field(1, ge=1, description="Ray actors encoding the texts, each holding the model "
                        "(one: up to 2,000 texts are encoded in the stage's own process, which starts sooner).")
    cpus_per_actor: float = Field(1.0, gt=0.0)

    @model_validator(mode="after")
    def _window_holds_the_negatives(self) -> "MineConfig":
        if self.range_min >= self.range_max:
            raise ValueError(f"mine.range_min ({self.range_min}) must be below mine.range_max ({self.range_max})")
        if self.num_negatives > self.range_max - self.range_min:
            raise ValueError(f"mine.num_negatives ({self.num_negatives}) must be at most range_max - range_min "
                             f"({self.range_max - self.range_min})")
        return self


SPEC = StageSpec(
    name="mine",
    section=MineConfig,
    description="A mining stage instead of a training one: writes the pairs with hard negatives; a later stage reads "
                "them with `stage:<name>` in data.train_paths.",
    implementation="lmplatform.pipeline.mine",
    makes="pairs_file",
    uses_init=True,
)
