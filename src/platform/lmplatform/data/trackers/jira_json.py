"""Jira's REST search JSON ({"issues": [...]}), a JSON list of its issues, or JSONL of them."""
from __future__ import annotations

from typing import Any, Sequence

from lmplatform.data.trackers.jsonfiles import check_some_read, read_export
from lmplatform.data.trackers.records import ReadResult, SourceRecord
from lmplatform.data.trackers.values import id_text

EXPECTED = ('jira-json: Jira REST search JSON {"issues": [{"key", "fields": {...}}]}, or a JSON list or JSONL of '
            "such issues")


def read_jira_json(paths: Sequence[str]) -> ReadResult:
    """Every issue of every file, with its duplicate links (`fields.issuelinks` of a type that names duplicates,
    either direction); an item without a `fields` object is skipped."""
    result = ReadResult()
    for path in paths:
        document = read_export(path, EXPECTED, result)
        items = document.items(["issues"], EXPECTED)
        shaped, first_reason = 0, ""
        for item in items:
            result.rows += 1
            issue = item.value
            if not isinstance(issue, dict) or not isinstance(issue.get("fields"), dict):
                first_reason = first_reason or f"{item.where}: no 'fields' object"
                result.skip("not a Jira issue (no 'fields' object)", item.where)
                continue
            shaped += 1
            key, number = id_text(issue.get("key")), id_text(issue.get("id"))
            where = item.where if item.line is not None or not (key or number) else f"{path}: issue {key or number}"
            result.records.append(SourceRecord(where, issue, [a for a in (key, number) if a],
                                               duplicate_links(issue["fields"].get("issuelinks"))))
        check_some_read(path, len(items), shaped, first_reason, EXPECTED)
    return result


def duplicate_links(issuelinks: Any) -> list[str]:
    """Keys of the issues linked by a link type that names duplicates ("Duplicate": "duplicates" / "is duplicated
    by"), outward and inward alike: the group does not depend on the direction."""
    keys: list[str] = []
    for link in issuelinks if isinstance(issuelinks, list) else []:
        if not isinstance(link, dict) or not _is_duplicate_type(link.get("type")):
            continue
        for side in ("outwardIssue", "inwardIssue"):
            other = link.get(side)
            if isinstance(other, dict) and (key := id_text(other.get("key")) or id_text(other.get("id"))):
                keys.append(key)
    return keys


def _is_duplicate_type(link_type: Any) -> bool:
    if not isinstance(link_type, dict):
        return False
    return any("duplicat" in str(link_type.get(part) or "").lower() for part in ("name", "inward", "outward"))
