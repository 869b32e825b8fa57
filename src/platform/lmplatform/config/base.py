"""The one base of every config model: run, evaluation, pipeline and serve configs, tune spaces, behavioural suites."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config model (named `*Config` where it is a section of a config file): unknown keys are errors, and
    assignments are validated too. A subclass's own `model_config` is merged with this one."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
