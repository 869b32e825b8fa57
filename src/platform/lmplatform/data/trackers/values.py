"""How a source value becomes a report value: a dotted path looked up in a nested record, a Jira/GitHub object
reduced to its name, a list of names joined, an identifier as text, a column name as a metadata name."""
from __future__ import annotations

import json
import re
from typing import Any, Optional, Union

from lmplatform.data.fields import LIST_SEPARATOR

Scalar = Union[str, int, float, bool]
_NAME_KEYS = ("name", "value", "displayName", "login", "key")  # what a Jira/GitHub/Bugzilla object is called by


def lookup(raw: dict[str, Any], path: str) -> Any:
    """`raw[path]` when `path` is a key of it (a CSV column may hold dots), else the dotted path walked through
    nested objects ("fields.project.name"); through a list it is walked in every item. None when missing."""
    if path in raw:
        return raw[path]
    value: Any = raw
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list):
            value = [item.get(part) for item in value if isinstance(item, dict)]
        else:
            return None
        if value is None:
            return None
    return value


def simplify(value: Any) -> Optional[Scalar]:
    """A scalar as is; an object by its name (Jira's {"name": "Major"}, GitHub's {"login": ...}); a list of such
    values joined with ", " (components, labels, versions). None for what has no such reading (nested objects,
    lists of comments), which is then not kept."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        for key in _NAME_KEYS:
            if isinstance(value.get(key), (str, int, float)) and not isinstance(value.get(key), bool):
                return value[key]
        return None
    if isinstance(value, list):
        items = [simplify(item) for item in value]
        if any(item is None and original is not None for item, original in zip(items, value)):
            return None
        return LIST_SEPARATOR.join(str(item).strip() for item in items if item is not None and str(item).strip())
    return None


def text(value: Any) -> str:
    """A report's text field: a string as is, Jira Cloud's rich-text document (Atlassian Document Format) as its
    plain text, a name or list of names as `simplify` gives it, "" when missing."""
    if isinstance(value, dict) and value.get("type") == "doc":
        return _document_text(value).strip()
    simple = simplify(value)
    return "" if simple is None else str(simple)


def _document_text(node: Any) -> str:
    if isinstance(node, list):
        return "".join(_document_text(child) for child in node)
    if not isinstance(node, dict):
        return ""
    if node.get("type") == "text":
        return str(node.get("text", ""))
    if node.get("type") == "hardBreak":
        return "\n"
    inner = _document_text(node.get("content", []))
    return inner + "\n" if node.get("type") in ("paragraph", "heading", "codeBlock", "blockquote", "listItem") else inner


def id_text(value: Any) -> Optional[str]:
    """An identifier as text ("13277068", "HADOOP-1"), or None when missing, empty or not a scalar."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (str, int, float)):
        return str(value).strip() or None
    return None


def metadata_name(source: str) -> str:
    """A source field or column as a metadata name: "Affects Version/s" -> "affects_versions", "Issue Type" ->
    "issue_type", "fixVersions" -> "fix_versions"; one spelling whatever the export's."""
    name = re.sub(r"/s\b", "s", source)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_").lower()


def not_unicode(fields: dict[str, Any]) -> Optional[str]:
    """Why a report cannot be written as UTF-8, if it cannot: a lone surrogate, from a JSON "\\ud800" escape or from
    bytes that were not UTF-8 (read with surrogateescape)."""
    try:
        json.dumps(fields, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(exc.object[exc.start])
        if 0xDC80 <= char <= 0xDCFF:
            return f"not valid UTF-8 (byte 0x{char - 0xDC00:02x})"
        return f"not valid Unicode (lone surrogate U+{char:04X})"
    return None
