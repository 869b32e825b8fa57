"""Jira REST JSON: fields mapped by default, links in both directions grouped, the other shapes (a list, JSONL)
read, a file of another format refused naming it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.data.trackers import TrackerImportConfig, import_tracker
from tests.data.trackers.exports import jira_issue, read_jsonl, write_json, write_jsonl


def _issues() -> list[dict]:
    return [
        jira_issue("HADOOP-10", 13277070, "2020-01-03T09:00:00.000+0000", outward=["HADOOP-9"]),  # chain: 10 -> 9 -> 1
        jira_issue("HADOOP-1", 13277068, "2020-01-01T02:52:00.000+0000", "Update the year to 2020",
                   description="Update the year", inward=["HADOOP-9"]),
        jira_issue("HADOOP-9", 13277069, "2020-01-02T10:00:00.000+0100", outward=["HADOOP-1"], inward=["HADOOP-10"]),
        jira_issue("HADOOP-2", 13277071, "2020-01-04T00:00:00.000+0000"),  # linked to nothing
    ]


def test_search_json_becomes_reports_and_one_group_with_the_earliest_as_master(tmp_path: Path) -> None:
    export = write_json(tmp_path / "export.json", {"startAt": 0, "maxResults": 50, "total": 4, "issues": _issues()})
    summary = import_tracker(TrackerImportConfig(format="jira-json", inputs=[str(export)], out=str(tmp_path / "out")))
    reports = read_jsonl(tmp_path / "out" / "reports.jsonl")
    assert [r["id"] for r in reports] == ["HADOOP-1", "HADOOP-9", "HADOOP-10", "HADOOP-2"]  # by created
    assert reports[0] == {
        "id": "HADOOP-1", "title": "Update the year to 2020", "description": "Update the year",
        "product": "Hadoop Common", "component": "fs, test", "created": "2020-01-01T02:52:00Z",
        "issue_id": "13277068", "updated": "2020-02-01T00:00:00Z", "issue_type": "Bug",  # project: the product
        "priority": "Major", "affects_versions": "3.2.1, 3.3.0", "resolution": "Duplicate", "status": "Resolved",
        "reporter": "alice",
    }
    assert reports[1]["created"] == "2020-01-02T09:00:00Z"  # +0100 read, written in UTC
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert [(p["duplicate_id"], p["master_id"], p["group"]) for p in pairs] == [
        ("HADOOP-9", "HADOOP-1", "HADOOP-1"), ("HADOOP-10", "HADOOP-1", "HADOOP-1")]
    assert summary.groups == 1 and summary.reports_in_groups == 3
    # each link is written on both of its issues, and "Relates" links are no duplicates
    assert summary.links["read"] == 4 and summary.links["kept"] == 2 and summary.links["unknown"] == {}
    assert summary.records_read == 4 and summary.reports_kept == 4 and summary.skipped.total == 0


def test_ids_mapped_to_the_numeric_id_still_follow_links_by_key(tmp_path: Path) -> None:
    export = write_json(tmp_path / "export.json", {"issues": _issues()})
    import_tracker(TrackerImportConfig(format="jira-json", inputs=[str(export)], out=str(tmp_path / "out"),
                                       mapping={"id": "id", "title": "fields.status.name", "key": "key"},
                                       metadata=["priority"]))
    reports = read_jsonl(tmp_path / "out" / "reports.jsonl")
    assert reports[0] == {"id": "13277068", "title": "Resolved", "description": "Update the year",
                          "product": "Hadoop Common", "component": "fs, test", "created": "2020-01-01T02:52:00Z",
                          "key": "HADOOP-1", "priority": "Major"}  # metadata kept: the listed and the mapped ones
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert [(p["duplicate_id"], p["master_id"]) for p in pairs] == [("13277069", "13277068"), ("13277070", "13277068")]


def test_a_json_list_and_jsonl_of_issues_are_read_and_a_bad_line_is_skipped_with_its_line(tmp_path: Path) -> None:
    issues = _issues()
    listed = write_json(tmp_path / "list.json", issues[:2])
    lines = write_jsonl(tmp_path / "more.jsonl", [issues[2], "{not json", {"key": "HADOOP-3"}, issues[3]])
    summary = import_tracker(TrackerImportConfig(format="jira-json", inputs=[str(listed), str(lines)],
                                                 out=str(tmp_path / "out")))
    assert summary.reports_kept == 4 and summary.records_read == 6
    skipped = summary.skipped.to_dict()
    assert skipped["not valid JSON"]["examples"] == [f"{lines}:2: not valid JSON (Expecting property name enclosed in "
                                                     "double quotes at column 2)"]
    assert skipped["not a Jira issue (no 'fields' object)"]["examples"] == [
        f"{lines}:3: not a Jira issue (no 'fields' object)"]
    assert len(read_jsonl(tmp_path / "out" / "pairs.jsonl")) == 2


def test_rich_text_descriptions_are_read_as_plain_text(tmp_path: Path) -> None:
    document = {"type": "doc", "version": 1, "content": [
        {"type": "paragraph", "content": [{"type": "text", "text": "NPE in "}, {"type": "text", "text": "close()"}]},
        {"type": "codeBlock", "content": [{"type": "text", "text": "at Foo.bar"}]}]}
    export = write_json(tmp_path / "e.json", {"issues": [jira_issue("X-1", 1, "2020-01-01T00:00:00.000+0000",
                                                                     description=document)]})
    import_tracker(TrackerImportConfig(format="jira-json", inputs=[str(export)], out=str(tmp_path / "out")))
    assert read_jsonl(tmp_path / "out" / "reports.jsonl")[0]["description"] == "NPE in close()\nat Foo.bar"


def test_a_file_of_another_format_is_refused_naming_the_file_and_the_format(tmp_path: Path) -> None:
    bugzilla = write_json(tmp_path / "bugs.json", {"bugs": [{"id": 1, "summary": "x"}]})
    with pytest.raises(DataError, match=rf"{bugzilla}: none of its 1 item\(s\) reads as jira-json: Jira REST search JSON"):
        import_tracker(TrackerImportConfig(format="jira-json", inputs=[str(bugzilla)], out=str(tmp_path / "out")))
    csv_file = tmp_path / "export.csv"
    csv_file.write_text("Summary,Issue key\nx,HADOOP-1\n")
    with pytest.raises(DataError, match=rf"{csv_file}: not JSON or JSONL .*; expected jira-json"):
        import_tracker(TrackerImportConfig(format="jira-json", inputs=[str(csv_file)], out=str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()
    assert json.loads(bugzilla.read_text())  # left as it was
