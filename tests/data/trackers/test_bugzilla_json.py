"""Bugzilla REST JSON: the description from the bug, or its first comment in the same or another file; dupe_of
chains grouped under the earliest bug."""
from __future__ import annotations

from pathlib import Path

from lmplatform.data.trackers import TrackerImportConfig, import_tracker
from tests.data.trackers.exports import bugzilla_bug, read_jsonl, write_json


def test_bugs_with_descriptions_from_comments_and_dupe_of_chains(tmp_path: Path) -> None:
    bugs = write_json(tmp_path / "bugs.json", {"bugs": [
        bugzilla_bug(1606683, "2020-01-03T08:00:00Z", dupe_of=1606682),  # chain: 83 -> 82 -> 81
        bugzilla_bug(1606681, "2020-01-02T17:14:21Z", "Port bug 752376", description="Port the following bug"),
        bugzilla_bug(1606682, "2020-01-02T18:00:00Z", dupe_of=1606681),
        bugzilla_bug(1606684, "Thu, 02 Jan 2020 19:00:00 +0000"),
        {"summary": "no id"},
    ], "comments": {"bugs": {"1606682": {"comments": [{"count": 1, "text": "second"}, {"count": 0, "text": "first"}]}}}})
    comments = write_json(tmp_path / "comments.json", {"bugs": {"1606683": {"comments": [{"text": "from file 2"}]}},
                                                       "comments": {}})
    summary = import_tracker(TrackerImportConfig(format="bugzilla-json", inputs=[str(bugs), str(comments)],
                                                 out=str(tmp_path / "out")))
    reports = read_jsonl(tmp_path / "out" / "reports.jsonl")
    assert [r["id"] for r in reports] == ["1606681", "1606682", "1606684", "1606683"]  # by created
    assert [r["description"] for r in reports] == ["Port the following bug", "first", "", "from file 2"]
    assert reports[0] == {
        "id": "1606681", "title": "Port bug 752376", "description": "Port the following bug", "product": "SeaMonkey",
        "component": "General", "created": "2020-01-02T17:14:21Z", "last_change_time": "2020-11-01T20:04:54Z",
        "priority": "--", "severity": "normal", "version": "SeaMonkey 2.49 Branch", "resolution": "FIXED",
        "status": "RESOLVED", "keywords": "regression, crash", "flags": "needinfo", "is_open": False}
    assert reports[2]["created"] == "2020-01-02T19:00:00Z"  # RFC 2822
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert [(p["duplicate_id"], p["master_id"]) for p in pairs] == [("1606682", "1606681"), ("1606683", "1606681")]
    assert summary.skipped.to_dict() == {"not a Bugzilla bug (no 'id')": {
        "count": 1, "examples": [f"{bugs}: item 5: not a Bugzilla bug (no 'id')"]}}


def test_a_bug_duplicate_of_one_not_exported_is_counted_as_an_unknown_link(tmp_path: Path) -> None:
    bugs = write_json(tmp_path / "bugs.json", [bugzilla_bug(2, "2020-01-02T00:00:00Z", dupe_of=1),
                                               bugzilla_bug(3, "2020-01-03T00:00:00Z", dupe_of=2)])
    summary = import_tracker(TrackerImportConfig(format="bugzilla-json", inputs=[str(bugs)], out=str(tmp_path / "out")))
    assert summary.links["unknown"]["link to an unknown report"] == {
        "count": 1, "examples": [f"{bugs}: bug 2: 2 - 1: '1' is no report read"]}
    assert read_jsonl(tmp_path / "out" / "pairs.jsonl") == [
        {"duplicate_id": "3", "master_id": "2", "group": "2", "split": "train"}]  # one duplicate: round(0.6) trains
