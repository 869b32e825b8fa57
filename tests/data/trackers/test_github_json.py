"""GitHub REST issues: pull requests skipped and counted; a `duplicate` label or close reason with "Duplicate of #N" in the
body or a comment links to N; a mark naming no issue is noted, a reference without a mark ignored."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.data.trackers import TrackerImportConfig, import_tracker
from tests.data.trackers.exports import github_issue, read_jsonl, write_json


def test_github_issues_pull_requests_and_duplicate_labels(tmp_path: Path) -> None:
    issues = write_json(tmp_path / "issues.json", [
        github_issue(1, "2021-03-01T10:00:00Z", "Crash on start", body="It crashes", labels=["bug"]),
        github_issue(2, "2021-03-02T10:00:00Z", body="Same here.\n\nDuplicate of #1", labels=["Duplicate", "bug"]),
        github_issue(3, "2021-03-03T10:00:00Z", body=None, labels=["duplicate"],
                     comments=[{"body": "Thanks!"}, {"body": "duplicate of #2"}]),  # the chain ends at #1
        github_issue(4, "2021-03-04T10:00:00Z", labels=["duplicate"]),  # names no issue: noted
        github_issue(5, "2021-03-05T10:00:00Z", body="Is this a duplicate of #1?"),  # not marked: no link
        github_issue(7, "2021-03-07T10:00:00Z", body="Duplicate of #5", state_reason="duplicate"),  # closed as one
        github_issue(8, "2021-03-08T10:00:00Z", state_reason="duplicate"),  # names no issue: noted
        github_issue(6, "2021-03-06T10:00:00Z", "Fix crash", body="Fixes #1", pull_request=True),
    ])
    summary = import_tracker(TrackerImportConfig(format="github-json", inputs=[str(issues)], out=str(tmp_path / "out")))
    reports = read_jsonl(tmp_path / "out" / "reports.jsonl")
    assert [r["id"] for r in reports] == ["1", "2", "3", "4", "5", "7", "8"]
    assert reports[0] == {"id": "1", "title": "Crash on start", "description": "It crashes", "product": "", "component": "",
                          "created": "2021-03-01T10:00:00Z", "issue_id": 1001, "html_url": "https://github.com/o/r/issues/1",
                          "user": "bob", "labels": "bug", "state": "closed", "locked": False,
                          "updated_at": "2021-01-01T00:00:00Z", "author_association": "NONE", "state_reason": "completed"}
    assert reports[2]["description"] == ""
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert [(p["duplicate_id"], p["master_id"]) for p in pairs] == [("2", "1"), ("3", "1"), ("7", "5")]
    assert summary.skipped.to_dict() == {"pull request": {"count": 1, "examples": [f"{issues}: number 6: pull request"]}}
    assert summary.notes.to_dict() == {"marked duplicate, but no 'Duplicate of #N' in its body or comments": {
        "count": 2, "examples": [f"{issues}: number 4", f"{issues}: number 8"]}}


def test_a_jira_export_given_as_github_is_refused(tmp_path: Path) -> None:
    jira = write_json(tmp_path / "jira.json", {"issues": [{"key": "X-1", "fields": {}}]})
    with pytest.raises(DataError, match=rf"{jira}: none of its 1 item\(s\) reads as github-json"):
        import_tracker(TrackerImportConfig(format="github-json", inputs=[str(jira)], out=str(tmp_path / "out")))
