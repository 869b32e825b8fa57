"""Duplicate links -> duplicate groups with a master each. A link may name a report by any identifier its source
gives it (a Jira key or numeric id, a Bugzilla alias); links are undirected, as trackers record them either way
round and sometimes both, so a group is a connected component (`data.groups.DuplicateGroups`) and its master is
its earliest report (created, then id): the one the others were filed after."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from lmplatform.data.groups import DuplicateGroups
from lmplatform.data.trackers.records import Tally

SortKey = tuple[bool, float, tuple[tuple[int, object], ...]]


def id_order(report_id: str) -> tuple[tuple[int, object], ...]:
    """Ids in natural order: "HADOOP-9" before "HADOOP-10", "99" before "100"."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", report_id) if part)


def report_order(report_id: str, created: Optional[float]) -> SortKey:
    """Earliest first, then by id; a report whose time is unknown after every known one."""
    return (created is None, created if created is not None else 0.0, id_order(report_id))


@dataclass(frozen=True)
class Group:
    master: str
    members: tuple[str, ...]  # earliest first, the master among them

    @property
    def duplicates(self) -> tuple[str, ...]:
        return self.members[1:]


@dataclass
class LinkCounts:
    read: int = 0  # links met, from the records and the links files
    kept: int = 0  # distinct links between two different reports
    unknown: Tally = field(default_factory=Tally)  # a side is no report (skipped, or not in the export)
    self_links: int = 0


def duplicate_groups(links: Iterable[tuple[str, str, str]], aliases: dict[str, str],
                     created: dict[str, Optional[float]]) -> tuple[list[Group], LinkCounts]:
    """The groups of `links` (one identifier, the other, where the link was read), each identifier resolved to a
    report id through `aliases`; the groups in their masters' order."""
    counts = LinkCounts()
    linked: DuplicateGroups[str] = DuplicateGroups()
    seen: set[frozenset[str]] = set()
    for one, other, where in links:
        counts.read += 1
        a, b = aliases.get(one), aliases.get(other)
        if a is None or b is None:
            missing = " and ".join(repr(x) for x, resolved in ((one, a), (other, b)) if resolved is None)
            counts.unknown.add("link to an unknown report", f"{where}: {one} - {other}: {missing} is no report read")
            continue
        if a == b:
            counts.self_links += 1
            continue
        if frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            counts.kept += 1
        linked.link(a, b)
    groups: dict[int, Group] = {}
    for members in linked.members().values():
        if id(members) not in groups:
            ordered = tuple(sorted(members, key=lambda r: report_order(r, created.get(r))))
            groups[id(members)] = Group(ordered[0], ordered)
    return sorted(groups.values(), key=lambda g: report_order(g.master, created.get(g.master))), counts
