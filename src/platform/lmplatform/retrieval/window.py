"""A time window over documents: a search that has one ranks only the documents filed inside it.

A tracker looks for the duplicates of a new report among the reports filed shortly before it: the duplicate-detection
literature ranks a report against the 365 days before it (`evaluation.online`). A window reads one metadata field
as a time (`StoredDocument.time`: `data.fields.parse_time`, once per document). A document whose time is missing or
does not parse is never inside a window: it cannot be shown to lie there (as `evaluation.online` never makes such a
report a candidate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lmplatform.data.fields import SECONDS_PER_DAY


@dataclass(frozen=True)
class TimeWindow:
    """Documents whose `field` lies in [after, before] (seconds since the epoch, both ends inclusive; None: open)."""

    field: str
    after: Optional[float] = None
    before: Optional[float] = None

    def __post_init__(self) -> None:
        if self.after is not None and self.before is not None and self.after > self.before:
            raise ValueError(f"the window ends before it starts ({self.after} > {self.before})")

    @classmethod
    def days_before(cls, field: str, moment: float, days: float) -> "TimeWindow":
        """The `days` up to and including `moment`."""
        return cls(field, moment - days * SECONDS_PER_DAY, moment)

    def contains(self, moment: Optional[float]) -> bool:
        """Whether a document filed at `moment` (None: unknown) lies inside the window."""
        return (moment is not None and (self.after is None or moment >= self.after)
                and (self.before is None or moment <= self.before))
