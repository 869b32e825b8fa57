"""Small, real-looking tracker exports the tracker tests write for themselves: Jira REST JSON and CSV, Bugzilla
REST JSON, GitHub REST JSON, JSONL."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Optional, Sequence


def jira_issue(key: str, number: int, created: str, summary: str = "", *, description: Any = "",
               outward: Sequence[str] = (), inward: Sequence[str] = (), component: str = "fs",
               extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """An issue as Jira's /rest/api/2/search returns it, with 'Duplicate' links outward and inward."""
    duplicate = {"id": "10002", "name": "Duplicate", "inward": "is duplicated by", "outward": "duplicates"}
    relates = {"id": "10003", "name": "Relates", "inward": "relates to", "outward": "relates to"}
    links = ([{"id": "1", "type": duplicate, "outwardIssue": {"id": "9", "key": k}} for k in outward]
             + [{"id": "2", "type": duplicate, "inwardIssue": {"id": "9", "key": k}} for k in inward]
             + [{"id": "3", "type": relates, "outwardIssue": {"id": "9", "key": "HADOOP-999"}}])
    fields = {
        "summary": summary or f"Issue {key}", "description": description,
        "created": created, "updated": "2020-02-01T00:00:00.000+0000", "resolutiondate": None,
        "project": {"id": "12310240", "key": "HADOOP", "name": "Hadoop Common"},
        "components": [{"id": "1", "name": component}, {"id": "2", "name": "test"}],
        "issuetype": {"id": "1", "name": "Bug"}, "priority": {"id": "3", "name": "Major"},
        "versions": [{"name": "3.2.1"}, {"name": "3.3.0"}], "resolution": {"name": "Duplicate"},
        "status": {"name": "Resolved"}, "labels": [], "customfield_12310320": None, "issuelinks": links,
        "reporter": {"name": "alice", "displayName": "Alice"},
        "watches": {"watchCount": 1, "isWatching": False},
    }
    fields.update(extra or {})
    return {"expand": "operations,renderedFields", "id": str(number), "self": f"https://jira/rest/api/2/issue/{number}",
            "key": key, "fields": fields}


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: Sequence[Any]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), encoding="utf-8")
    return path


JIRA_CSV_HEADER = ["Summary", "Issue key", "Issue id", "Issue Type", "Status", "Project key", "Project name", "Priority",
                   "Resolution", "Created", "Updated", "Resolved", "Affects Version/s", "Affects Version/s",
                   "Component/s", "Component/s", "Description", "Custom field (Story Points)",
                   "Outward issue link (Duplicate)", "Outward issue link (Duplicate)", "Inward issue link (Duplicate)",
                   "Outward issue link (Relates)"]


def jira_csv_row(summary: str, key: str, number: int, created: str, *, description: str = "",
                 components: Sequence[str] = ("fs",), outward: Sequence[str] = (), inward: str = "",
                 resolved: str = "") -> list[str]:
    comps = (list(components) + ["", ""])[:2]
    outs = (list(outward) + ["", ""])[:2]
    return [summary, key, str(number), "Bug", "Resolved", "HADOOP", "Hadoop Common", "Major", "Duplicate", created,
            "02/Jan/20 16:30", resolved, "3.2.1", "", *comps, description, "", *outs, inward, "HADOOP-999"]


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def bugzilla_bug(number: int, created: str, summary: str = "", *, dupe_of: Optional[int] = None,
                 **extra: Any) -> dict[str, Any]:
    """A bug as Bugzilla's /rest/bug returns it (no description: that is comment 0)."""
    bug = {"id": number, "summary": summary or f"Bug {number}", "product": "SeaMonkey", "component": "General",
           "creation_time": created, "last_change_time": "2020-11-01T20:04:54Z", "priority": "--",
           "severity": "normal", "version": "SeaMonkey 2.49 Branch", "resolution": "DUPLICATE" if dupe_of else "FIXED",
           "status": "RESOLVED", "dupe_of": dupe_of, "keywords": ["regression", "crash"], "cc": [],
           "flags": [{"name": "needinfo", "status": "?"}], "alias": None, "is_open": False}
    bug.update(extra)
    return bug


def github_issue(number: int, created: str, title: str = "", *, body: Optional[str] = "", labels: Sequence[str] = (),
                 comments: Any = 0, pull_request: bool = False, state_reason: Optional[str] = "completed") -> dict[str, Any]:
    """An issue as GitHub's /repos/{owner}/{repo}/issues returns it."""
    issue = {"url": f"https://api.github.com/repos/o/r/issues/{number}",
             "repository_url": "https://api.github.com/repos/o/r",
             "html_url": f"https://github.com/o/r/issues/{number}", "id": 1000 + number, "node_id": "I_kw",
             "number": number, "title": title or f"Issue {number}", "user": {"login": "bob", "id": 7},
             "labels": [{"id": i, "name": name, "color": "ededed"} for i, name in enumerate(labels)],
             "state": "closed", "locked": False, "assignee": None, "comments": comments, "created_at": created,
             "updated_at": "2021-01-01T00:00:00Z", "closed_at": None, "author_association": "NONE", "body": body,
             "state_reason": state_reason,
             "reactions": {"url": "x", "total_count": 0}}
    if pull_request:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/o/r/pulls/{number}"}
    return issue


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
