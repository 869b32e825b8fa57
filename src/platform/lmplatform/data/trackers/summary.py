"""What an import did, as `import_summary.json` keeps it and `lmp data import` prints it: a line per event."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lmplatform.data.trackers.records import Tally


@dataclass
class ImportSummary:
    """records_read: rows, issues or bugs met (skipped ones included); skipped: those that are no report, by reason;
    notes: read but not used; dates: per time field, {"known", "missing", "unparsed", "examples"}; links: read, kept
    (distinct, between two reports), unknown (a side is no report), self links, rows of links files skipped;
    groups, reports_in_groups; pairs: per split; unplaced: duplicates left out of the pairs (time unknown);
    split: the rule (and for the time split its cut times)."""

    format: str
    inputs: list[str]
    links_files: list[str]
    out: str
    files: dict[str, str] = field(default_factory=dict)
    records_read: int = 0
    reports_kept: int = 0
    reports_without_text: int = 0
    skipped: Tally = field(default_factory=Tally)
    notes: Tally = field(default_factory=Tally)
    dates: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: dict[str, Any] = field(default_factory=dict)
    groups: int = 0
    reports_in_groups: int = 0
    pairs: dict[str, int] = field(default_factory=dict)
    unplaced: Tally = field(default_factory=Tally)
    split: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "inputs": self.inputs, "links_files": self.links_files, "out": self.out,
            "files": self.files,
            "records": {"read": self.records_read, "kept": self.reports_kept, "skipped": self.skipped.total,
                        "kept_without_text": self.reports_without_text},
            "skipped": self.skipped.to_dict(), "notes": self.notes.to_dict(), "dates": self.dates,
            "links": self.links, "groups": {"count": self.groups, "reports": self.reports_in_groups},
            "pairs": {**self.pairs, "total": sum(self.pairs.values())},
            "unplaced": self.unplaced.to_dict(), "split": self.split,
        }

    def lines(self) -> list[str]:
        """One line per event: reports kept and skipped (per reason), notes, times unknown per field, links,
        groups, pairs per split with the cut times, the files written."""
        out = [f"read {self.records_read} record(s) from {len(self.inputs)} file(s) as {self.format}: "
               f"kept {self.reports_kept} report(s), skipped {self.skipped.total}"
               + (f" ({self.reports_without_text} kept have no title or description)" if self.reports_without_text else "")]
        out += [f"skipped {count}: {reason} (e.g. {self.skipped.examples[reason][0]})"
                for reason, count in _by_count(self.skipped)]
        out += [f"note {count}: {reason} (e.g. {self.notes.examples[reason][0]})" for reason, count in _by_count(self.notes)]
        for name, counts in self.dates.items():
            unknown = counts["missing"] + counts["unparsed"]
            if unknown:
                example = f", e.g. {counts['examples'][0]}" if counts["examples"] else ""
                out.append(f"dates: {name} unknown for {unknown} of {unknown + counts['known']} "
                           f"({counts['missing']} missing, {counts['unparsed']} not parsed{example})")
        links = self.links
        unknown = links.get("unknown", {}).get("link to an unknown report", {})
        out.append(f"links: {links.get('read', 0)} read, {links.get('kept', 0)} distinct between reports, "
                   f"{unknown.get('count', 0)} to unknown reports"
                   + (f" (e.g. {unknown['examples'][0]})" if unknown.get("examples") else "")
                   + (f", {links['self']} from a report to itself" if links.get("self") else ""))
        for reason, detail in links.get("rows_skipped", {}).items():
            out.append(f"links: skipped {detail['count']} row(s): {reason} (e.g. {detail['examples'][0]})")
        out.append(f"groups: {self.groups} duplicate group(s) of {self.reports_in_groups} report(s)")
        out.append("pairs: " + ", ".join(self._split_parts()))
        if self.unplaced.total:
            reason, _ = _by_count(self.unplaced)[0]
            out.append(f"pairs: {self.unplaced.total} duplicate(s) left out: {reason} "
                       f"(e.g. {self.unplaced.examples[reason][0]})")
        out.append("wrote " + ", ".join(self.files.values()))
        return out

    def _split_parts(self) -> list[str]:
        if self.split.get("rule") == "time":
            ranges = self.split.get("ranges", {})
            return [f"{name} {self.pairs.get(name, 0)}" + (f" (created {r[0]} to {r[1]})" if (r := ranges.get(name)) else "")
                    for name in ("train", "dev", "test")]
        parts = [f"{name} {self.pairs.get(name, 0)}" for name in ("train", "dev", "test")]
        return parts[:-1] + [parts[-1] + f" (whole groups by sha256, seed {self.split.get('seed')})"]


def _by_count(tally: Tally) -> list[tuple[str, int]]:
    return sorted(tally.counts.items(), key=lambda item: (-item[1], item[0]))
