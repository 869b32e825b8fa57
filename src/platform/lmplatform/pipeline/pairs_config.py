"""The `pairs` stage kind (a data stage): one pairs file per split from a report corpus and its duplicate relations;
runs in `pipeline/pairs.py`."""
from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.pipeline.spec import NAME_PATTERN, StageSpec


class HoldoutConfig(Section):
    """Cut one split in two by duplicate group, e.g. dev into a part that selects and a part that confirms."""

    split: str = Field("dev", min_length=1, description="The split to cut; its file is replaced by the two parts.")
    into: tuple[str, str] = Field(("dev_select", "dev_confirm"), description="Names of the two parts (outputs of the stage).")
    fraction: float = Field(0.5, gt=0.0, lt=1.0, description="Share of the split's groups that go to the second part.")
    seed: int = Field(0, description="Salts the group hash that assigns each group to a part.")


class PairsConfig(Section):
    """A `pairs` stage: one pairs file per split from a report corpus and its duplicate relations, each pair with
    its duplicate group (what `lmp data pairs` writes). Later stages name a file as `stage:<name>/<split>`."""

    corpus: str = Field(..., min_length=1, description="JSONL of reports, one object per line.")
    relations: str = Field(..., min_length=1, description="JSONL of duplicate pairs (or links, with format: links).")
    format: Literal["pairs", "links"] = "pairs"
    fields: list[str] = Field(["title", "description"], min_length=1, description="Report fields joined into a text.")
    id_field: str = "id"
    query_id_field: str = "duplicate_id"
    target_id_field: str = "master_id"
    split_field: str = Field("split", description="Field of the relation rows naming the split.")
    splits: list[str] = Field(["train", "dev", "test"], min_length=1, description="Splits to write.")
    holdout: Optional[HoldoutConfig] = None
    limit: Optional[int] = Field(None, ge=1, description="At most this many pairs per split (smoke runs).")

    @model_validator(mode="after")
    def _outputs_are_distinct(self) -> "PairsConfig":
        if len(set(self.splits)) != len(self.splits):
            raise ValueError(f"pairs.splits names a split twice: {self.splits}")
        if self.holdout is not None:
            if self.holdout.split not in self.splits:
                raise ValueError(f"pairs.holdout.split {self.holdout.split!r} "
                                 f"is not one of pairs.splits ({', '.join(self.splits)})")
            clash = set(self.holdout.into) & (set(self.splits) - {self.holdout.split})
            if clash or self.holdout.into[0] == self.holdout.into[1]:
                raise ValueError(f"pairs.holdout.into {list(self.holdout.into)} must be two new names, distinct from the splits")
            for name in self.holdout.into:
                if not re.match(NAME_PATTERN, name):
                    raise ValueError(f"pairs.holdout.into: {name!r} must match {NAME_PATTERN}")
        for name in self.splits:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"pairs.splits: {name!r} must match {NAME_PATTERN} (it names a file)")
        return self

    def outputs(self) -> list[str]:
        """The files the stage writes, by name (`stage:<stage>/<output>`)."""
        if self.holdout is None:
            return list(self.splits)
        return [part for split in self.splits
                for part in (self.holdout.into if split == self.holdout.split else (split,))]


SPEC = StageSpec(
    name="pairs",
    section=PairsConfig,
    description="A data stage: pairs files per split from a corpus and its duplicate relations; a later stage names "
                "one as `stage:<name>/<split>`.",
    implementation="lmplatform.pipeline.pairs",
    makes="files",
    outputs=lambda section: section.outputs(),
)
