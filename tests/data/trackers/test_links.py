"""Links -> groups: chains and both directions make one group, its master the earliest report (then the smallest
id, in natural order); links through aliases; unknown sides and self links counted."""
from __future__ import annotations

from lmplatform.data.trackers.links import duplicate_groups, id_order


def test_chains_in_both_directions_are_one_group_under_the_earliest() -> None:
    created = {"A": 30.0, "B": 10.0, "C": 20.0, "D": 5.0, "E": None, "F": None}
    links = [("A", "B", "f:1"), ("C", "B", "f:2"), ("B", "A", "f:3"), ("E", "F", "f:4"), ("D", "D", "f:5"), ("A", "Z", "f:6")]
    groups, counts = duplicate_groups(links, {k: k for k in created}, created)
    assert [(g.master, g.members) for g in groups] == [("B", ("B", "C", "A")), ("E", ("E", "F"))]  # unknown times last
    assert groups[0].duplicates == ("C", "A")
    assert counts.read == 6 and counts.kept == 3 and counts.self_links == 1
    assert counts.unknown.to_dict() == {"link to an unknown report": {
        "count": 1, "examples": ["f:6: A - Z: 'Z' is no report read"]}}


def test_links_name_reports_by_alias_and_ties_go_to_the_smaller_id() -> None:
    aliases = {"HADOOP-10": "10", "HADOOP-9": "9", "10": "10", "9": "9"}
    groups, counts = duplicate_groups([("HADOOP-10", "9", "x")], aliases, {"10": 1.0, "9": 1.0})
    assert [(g.master, g.members) for g in groups] == [("9", ("9", "10"))]  # natural order: 9 before 10
    assert sorted(["HADOOP-10", "HADOOP-9", "HADOOP-100"], key=id_order) == ["HADOOP-9", "HADOOP-10", "HADOOP-100"]
