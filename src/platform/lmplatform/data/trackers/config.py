"""What an import reads and how: the format, the files, the field mapping over the format's defaults, the split."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.data.fields import EpochUnit

TrackerFormat = Literal["jira-json", "jira-csv", "bugzilla-json", "github-json", "jsonl"]
CORE_FIELDS = ("id", "title", "description", "product", "component", "created")


class SplitFractions(Section):
    """The share of duplicates (time split) or of groups (group split) in each split."""

    train: float = Field(0.6, ge=0, le=1)
    dev: float = Field(0.2, ge=0, le=1)
    test: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _sum_to_one(self) -> SplitFractions:
        if abs(self.train + self.dev + self.test - 1) > 1e-6:
            raise ValueError(f"split fractions must sum to 1, not {self.train + self.dev + self.test:g} "
                             f"(train {self.train:g}, dev {self.dev:g}, test {self.test:g})")
        return self


class TrackerImportConfig(Section):
    """One import: `inputs` of one `format` (and JSONL `links` files of any), written to the folder `out`.

    mapping: output field -> source path (dotted for nested JSON: "fields.summary"; a CSV column by its name).
      For id, title, description, product, component and created it replaces the format's default ("" reads
      nothing: the field is empty); any other name adds a metadata field from that path.
    metadata: the metadata fields kept (their output names); default every other scalar field of the record.
    date_fields: metadata fields read as times and written as ISO 8601 UTC; default per format (resolved, ...).
    link_fields: the two id fields of the links files' rows; default duplicate_id/master_id or id_a/id_b.
    split: "time" (oldest duplicates train, newest test) or "group" (whole groups by a stable hash with `seed`).
    """

    format: TrackerFormat
    inputs: list[str] = Field(min_length=1)
    links: list[str] = Field(default_factory=list)
    out: str
    mapping: dict[str, str] = Field(default_factory=dict)
    metadata: Optional[list[str]] = None
    date_fields: Optional[list[str]] = None
    link_fields: Optional[tuple[str, str]] = None
    split: Literal["time", "group"] = "time"
    fractions: SplitFractions = Field(default_factory=SplitFractions)
    seed: int = 0
    epoch_unit: EpochUnit = "auto"

    @model_validator(mode="after")
    def _names(self) -> TrackerImportConfig:
        for name, path in self.mapping.items():
            if not name.strip():
                raise ValueError(f"mapping: an empty output name (for source path {path!r})")
            if not path.strip() and name not in CORE_FIELDS:
                raise ValueError(f"mapping: {name!r} needs a source path (only {', '.join(CORE_FIELDS)} may be empty)")
        if "id" in self.mapping and not self.mapping["id"].strip():
            raise ValueError("mapping: id needs a source path; a report without an id cannot be linked")
        return self
