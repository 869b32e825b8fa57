"""Bugzilla's REST JSON: bugs ({"bugs": [...]}, a JSON list or JSONL of bugs) and, optionally, their comments
({"bugs": {"<id>": {"comments": [...]}}}, as /rest/bug/<id>/comment gives them) in the same or another file.
A bug's description is its first comment, which REST gives apart from the bug."""
from __future__ import annotations

from typing import Any, Sequence

from lmplatform.data.trackers.jsonfiles import Item, check_some_read, read_export
from lmplatform.data.trackers.records import ReadResult, SourceRecord
from lmplatform.data.trackers.values import id_text

EXPECTED = ('bugzilla-json: Bugzilla REST JSON {"bugs": [{"id", "summary", ...}]} (or a JSON list or JSONL of bugs), '
            'optionally with comments {"bugs": {"<id>": {"comments": [{"text"}]}}}')


def read_bugzilla_json(paths: Sequence[str]) -> ReadResult:
    """Every bug of every file, its description filled in from its comments when it has none, its `dupe_of` a
    link. A file of comments only adds descriptions."""
    result = ReadResult()
    comments: dict[str, list[Any]] = {}
    bugs: list[Item] = []
    for path in paths:
        document = read_export(path, EXPECTED, result)
        value = document.value
        if isinstance(value, dict):
            comments.update(_comment_lists(value.get("comments")))
            if isinstance(value.get("bugs"), dict):  # a comments file: {"bugs": {"<id>": {"comments": [...]}}}
                comments.update(_comment_lists(value["bugs"]))
                continue
        items = document.items(["bugs"], EXPECTED)
        shaped, first_reason = 0, ""
        for item in items:
            result.rows += 1
            if not isinstance(item.value, dict) or id_text(item.value.get("id")) is None:
                first_reason = first_reason or f"{item.where}: no 'id'"
                result.skip("not a Bugzilla bug (no 'id')", item.where)
                continue
            shaped += 1
            bugs.append(item)
        check_some_read(path, len(items), shaped, first_reason, EXPECTED)
    for item in bugs:
        bug = dict(item.value)
        number = id_text(bug["id"]) or ""
        if "description" not in bug:
            bug["description"] = _first_comment_text(comments.get(number) or bug.get("comments"))
        aliases = [number] + [a for a in (_aliases(bug.get("alias"))) if a]
        where = item.where if item.line is not None else f"{item.path}: bug {number}"
        dupe_of = id_text(bug.get("dupe_of"))
        result.records.append(SourceRecord(where, bug, aliases, [dupe_of] if dupe_of else []))
    return result


def _comment_lists(value: Any) -> dict[str, list[Any]]:
    """{"<id>": [comments]} from {"<id>": {"comments": [...]}}, {"<id>": [...]} or {"bugs": {...}}."""
    if not isinstance(value, dict):
        return {}
    if isinstance(value.get("bugs"), dict):
        value = value["bugs"]
    lists: dict[str, list[Any]] = {}
    for bug_id, entry in value.items():
        entries = entry.get("comments") if isinstance(entry, dict) else entry
        if isinstance(entries, list):
            lists[str(bug_id)] = entries
    return lists


def _first_comment_text(entries: Any) -> str:
    """The text of the bug's first comment (the lowest `count`, Bugzilla's comment 0), "" when there is none."""
    comments = [c for c in entries if isinstance(c, dict)] if isinstance(entries, list) else []
    if not comments:
        return ""
    first = min(comments, key=lambda c: c["count"] if isinstance(c.get("count"), int) else float("inf")) \
        if any(isinstance(c.get("count"), int) for c in comments) else comments[0]
    text = first.get("text", first.get("raw_text", ""))
    return text if isinstance(text, str) else ""


def _aliases(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [a for a in (id_text(v) for v in values) if a]
