"""GitHub's REST issues list (a JSON list, search's {"items": [...]}, or JSONL). Pull requests, which the same
endpoint returns, are skipped and counted. GitHub has no field naming the issue duplicated: an issue marked duplicate
(labelled `duplicate`, or closed as a duplicate: `state_reason` "duplicate") whose body or comments say
"Duplicate of #N" (what GitHub's own duplicate marking writes) is linked to issue N."""
from __future__ import annotations

import re
from typing import Any, Sequence

from lmplatform.data.trackers.jsonfiles import check_some_read, read_export
from lmplatform.data.trackers.records import ReadResult, SourceRecord
from lmplatform.data.trackers.values import id_text

EXPECTED = ('github-json: GitHub REST issues, a JSON list (or {"items": [...]}, or JSONL) of '
            '{"number", "title", "body", "created_at", "labels", ...}')
_DUPLICATE_OF = re.compile(r"(?i)\bduplicate\s+of\s+#(\d+)\b")


def read_github_json(paths: Sequence[str]) -> ReadResult:
    """Every issue of every file, pull requests skipped, with its "Duplicate of #N" link when marked duplicate.
    A duplicate mark that names no issue is counted in the notes."""
    result = ReadResult()
    for path in paths:
        document = read_export(path, EXPECTED, result)
        items = document.items(["items", "issues"], EXPECTED)
        shaped, first_reason = 0, ""
        for item in items:
            result.rows += 1
            issue = item.value
            number = id_text(issue.get("number")) if isinstance(issue, dict) else None
            if number is None:
                first_reason = first_reason or f"{item.where}: no 'number'"
                result.skip("not a GitHub issue (no 'number')", item.where)
                continue
            shaped += 1
            where = item.where if item.line is not None else f"{path}: number {number}"
            if issue.get("pull_request") is not None:
                result.skip("pull request", where)
                continue
            links = duplicate_references(issue)
            if _marked_duplicate(issue) and not links:
                result.notes.add("marked duplicate, but no 'Duplicate of #N' in its body or comments", where)
            result.records.append(SourceRecord(where, issue, [number], links))
        check_some_read(path, len(items), shaped, first_reason, EXPECTED)
    return result


def duplicate_references(issue: dict[str, Any]) -> list[str]:
    """The N of each "Duplicate of #N" in the body or comments of an issue marked duplicate; none otherwise, as
    "duplicate of #N" in an unmarked issue is as often a question as a verdict."""
    if not _marked_duplicate(issue):
        return []
    comments = issue.get("comments") if isinstance(issue.get("comments"), list) else []  # else GitHub's count
    texts = [issue.get("body")] + [c.get("body") for c in comments if isinstance(c, dict)]
    return list(dict.fromkeys(n for t in texts if isinstance(t, str) for n in _DUPLICATE_OF.findall(t)))


def _marked_duplicate(issue: dict[str, Any]) -> bool:
    """Labelled `duplicate`, or closed as a duplicate (GitHub's close reason)."""
    if issue.get("state_reason") == "duplicate":
        return True
    labels = issue.get("labels") if isinstance(issue.get("labels"), list) else []
    names = [label.get("name") if isinstance(label, dict) else label for label in labels]
    return any(isinstance(name, str) and name.strip().lower() == "duplicate" for name in names)
