"""What a format reader hands on: the records it read (each with where it came from, the identifiers links may
name it by and the duplicate links the source gives it), and what it could not read, counted by reason."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXAMPLES = 5  # examples kept per reason: enough to find the rows, few enough to read


@dataclass
class Tally:
    """Counts per reason, with the first few examples of each ("file:line: detail" or "file: issue KEY: detail")."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, example: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        kept = self.examples.setdefault(reason, [])
        if len(kept) < EXAMPLES:
            kept.append(example)

    def merge(self, other: Tally) -> None:
        for reason, count in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + count
            kept = self.examples.setdefault(reason, [])
            kept.extend(other.examples.get(reason, [])[: EXAMPLES - len(kept)])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {reason: {"count": count, "examples": self.examples.get(reason, [])}
                for reason, count in sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))}


@dataclass
class SourceRecord:
    """One issue or bug as its export gives it.

    raw: the source object (a Jira CSV column that repeats holds the list of its non-empty cells);
    aliases: identifiers a link may name it by besides its mapped id (a Jira key and numeric id, a Bugzilla alias);
    links: identifiers of the reports the source marks as its duplicates, in either direction."""

    where: str
    raw: dict[str, Any]
    aliases: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


@dataclass
class ReadResult:
    """Everything one format reader read from all its files."""

    records: list[SourceRecord] = field(default_factory=list)
    rows: int = 0  # rows, issues or bugs met, the skipped ones included
    skipped: Tally = field(default_factory=Tally)  # rows that are not reports, by reason
    notes: Tally = field(default_factory=Tally)  # read but not used, e.g. a duplicate label naming no issue

    def skip(self, reason: str, where: str, detail: str = "") -> None:
        self.skipped.add(reason, f"{where}: {detail or reason}")
