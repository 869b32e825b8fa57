"""Which split each duplicate's pair goes to.

time: the duplicates ordered by when they were filed; the oldest `train` share trains, the next `dev`, the newest
  `test`: an evaluation that asks, as a deployed finder is asked, to find today's duplicates among reports filed
  before. Duplicates filed at the same second as a cut go with the earlier split, so that the cut times state the
  rule exactly (train: created <= train_until; dev: <= dev_until; test: after). A duplicate whose time is unknown
  cannot be placed and is left out (counted).
group: a stable hash (sha256) of the seed and the group's master puts each whole group in one split: no group is
  seen in training and again in evaluation, and adding reports later moves no group but a new or merged one.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from lmplatform.data.fields import iso_utc
from lmplatform.data.trackers.config import SplitFractions
from lmplatform.data.trackers.links import Group, id_order

SPLITS = ("train", "dev", "test")


@dataclass
class SplitAssignment:
    split: dict[str, str]  # duplicate id -> train/dev/test
    unplaced: list[str] = field(default_factory=list)  # duplicates left out: created unknown (time split)
    rule: dict[str, Any] = field(default_factory=dict)  # how, for the summary


def time_split(groups: Sequence[Group], created: dict[str, Optional[float]], fractions: SplitFractions) -> SplitAssignment:
    """Every duplicate (non-master member) by its created time; see the module doc."""
    duplicates = [d for g in groups for d in g.duplicates]
    placed = sorted((d for d in duplicates if created.get(d) is not None), key=lambda d: (created[d], id_order(d)))
    unplaced = [d for d in duplicates if created.get(d) is None]
    times = [float(created[d]) for d in placed]  # type: ignore[arg-type]
    n = len(placed)
    train_end = _after_ties(times, round(n * fractions.train))
    dev_end = _after_ties(times, max(train_end, round(n * (fractions.train + fractions.dev))))
    split = {d: "train" if i < train_end else "dev" if i < dev_end else "test" for i, d in enumerate(placed)}
    ranges = {name: [iso_utc(times[lo]), iso_utc(times[hi - 1])] if hi > lo else None
              for name, lo, hi in (("train", 0, train_end), ("dev", train_end, dev_end), ("test", dev_end, n))}
    rule = {
        "rule": "time",
        "fractions": fractions.model_dump(),
        "train_until": iso_utc(times[train_end - 1]) if train_end else None,
        "dev_until": iso_utc(times[dev_end - 1]) if dev_end else None,
        "ranges": ranges,
        "description": "duplicates by created time: train created <= train_until, dev <= dev_until, test after",
    }
    return SplitAssignment(split, unplaced, rule)


def _after_ties(times: list[float], cut: int) -> int:
    """`cut` moved past the duplicates filed at the same time as the last one before it."""
    while 0 < cut < len(times) and times[cut] == times[cut - 1]:
        cut += 1
    return cut


def group_split(groups: Sequence[Group], fractions: SplitFractions, seed: int) -> SplitAssignment:
    """Every duplicate in its group's split; see the module doc."""
    split: dict[str, str] = {}
    for group in groups:
        name = group_bucket(group.master, fractions, seed)
        split.update((d, name) for d in group.duplicates)
    rule = {"rule": "group", "fractions": fractions.model_dump(), "seed": seed,
            "description": "whole groups: sha256 of '<seed>:<master id>' as a fraction of 2**64 against the fractions"}
    return SplitAssignment(split, [], rule)


def group_bucket(group_id: str, fractions: SplitFractions, seed: int) -> str:
    """The split of one group: the first 8 bytes of sha256("<seed>:<group id>") as a fraction in [0, 1)."""
    digest = hashlib.sha256(f"{seed}:{group_id}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64
    return "train" if point < fractions.train else "dev" if point < fractions.train + fractions.dev else "test"
