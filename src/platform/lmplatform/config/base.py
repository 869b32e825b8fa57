"""The base model every config section derives from."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, and assignments are validated too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
