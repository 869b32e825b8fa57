"""Duplicate groups: chains of pairs make one group, whatever the order the pairs come in."""
from __future__ import annotations

from lmplatform.data.groups import DuplicateGroups


def test_chains_of_pairs_are_one_group_and_unlinked_items_stay_apart() -> None:
    groups: DuplicateGroups[str] = DuplicateGroups()
    for a, b in [("a", "b"), ("c", "d"), ("b", "c"), ("x", "y")]:
        groups.link(a, b)
    members = groups.members()
    assert members["a"] == {"a", "b", "c", "d"} and members["a"] is members["d"]  # one set per group
    assert members["y"] == {"x", "y"}
    assert groups.find("a") == groups.find("d") != groups.find("x")
    assert "a" in groups and "z" not in groups


def test_an_item_first_seen_by_find_is_a_group_of_its_own() -> None:
    groups: DuplicateGroups[int] = DuplicateGroups()
    assert groups.find(7) == 7 and groups.members() == {7: {7}}
