"""The time split puts the oldest duplicates in train and the newest in test, ties at a cut with the earlier split,
and reports its cut times; the group split keeps whole groups together, the same for the same seed."""
from __future__ import annotations

from collections import defaultdict

from lmplatform.data.trackers.config import SplitFractions
from lmplatform.data.trackers.links import Group
from lmplatform.data.trackers.splits import group_split, time_split

DAY = 86_400.0


def test_time_split_orders_duplicates_by_created_and_reports_the_cuts() -> None:
    # 10 duplicates d0..d9 filed on days 1..10 (masters on day 0), one more whose time is unknown
    groups = [Group(f"m{i}", (f"m{i}", f"d{i}")) for i in range(10)] + [Group("m10", ("m10", "d10"))]
    created = {f"d{i}": (i + 1) * DAY for i in range(10)} | {f"m{i}": 0.0 for i in range(11)} | {"d10": None}
    result = time_split(groups, created, SplitFractions())
    assert [d for d, s in result.split.items() if s == "train"] == [f"d{i}" for i in range(6)]
    assert [d for d, s in result.split.items() if s == "dev"] == ["d6", "d7"]
    assert [d for d, s in result.split.items() if s == "test"] == ["d8", "d9"]
    assert result.unplaced == ["d10"]
    assert result.rule["train_until"] == "1970-01-07T00:00:00Z" and result.rule["dev_until"] == "1970-01-09T00:00:00Z"
    assert result.rule["ranges"] == {"train": ["1970-01-02T00:00:00Z", "1970-01-07T00:00:00Z"],
                                     "dev": ["1970-01-08T00:00:00Z", "1970-01-09T00:00:00Z"],
                                     "test": ["1970-01-10T00:00:00Z", "1970-01-11T00:00:00Z"]}


def test_time_split_keeps_duplicates_filed_at_a_cut_time_in_the_earlier_split() -> None:
    groups = [Group("m", ("m", "a", "b", "c", "d", "e"))]
    created = {"m": 0.0, "a": DAY, "b": 2 * DAY, "c": 2 * DAY, "d": 2 * DAY, "e": 3 * DAY}
    result = time_split(groups, created, SplitFractions(train=0.4, dev=0.2, test=0.4))
    assert result.split == {"a": "train", "b": "train", "c": "train", "d": "train", "e": "test"}
    assert result.rule["train_until"] == result.rule["dev_until"] == "1970-01-03T00:00:00Z"
    assert result.rule["ranges"]["dev"] is None


def test_group_split_keeps_groups_whole_and_is_stable() -> None:
    groups = [Group(f"g{i}", tuple(f"g{i}" if j == 0 else f"g{i}-{j}" for j in range(1 + i % 4))) for i in range(300)]
    first = group_split(groups, SplitFractions(), seed=0)
    splits_of = defaultdict(set)
    for group in groups:
        for duplicate in group.duplicates:
            splits_of[group.master].add(first.split[duplicate])
    assert all(len(s) <= 1 for s in splits_of.values())
    per_group = [next(iter(s)) for s in splits_of.values() if s]
    assert 0.45 < per_group.count("train") / len(per_group) < 0.75 and per_group.count("test") > 0
    assert group_split(groups, SplitFractions(), seed=0).split == first.split
    assert group_split(groups, SplitFractions(), seed=1).split != first.split
    assert first.rule["rule"] == "group" and first.unplaced == []
