"""Per format: its reader, and the defaults that make the common export need no mapping (where each report field
is, which other fields are metadata and under what name, which of them are times)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Pattern, Sequence

from lmplatform.data.trackers import bugzilla_json, github_json, jira_csv, jira_json, jsonl
from lmplatform.data.trackers.records import ReadResult


@dataclass(frozen=True)
class FormatSpec:
    """core: report field -> source path (None: none, always ""); extra: metadata name -> source path;
    roots: objects whose fields are the other metadata ("" the record itself); exclude, exclude_pattern: source
    fields never metadata unless `extra` names them (links, comments, GitHub's API URLs); renames: source field -> metadata name,
    where `values.metadata_name`'s would differ from another format's (Jira JSON's "versions" is the CSV's
    "Affects Version/s"); dates: metadata fields that are times."""

    name: str
    expected: str
    read: Callable[[Sequence[str]], ReadResult]
    core: dict[str, Optional[str]]
    extra: dict[str, str] = field(default_factory=dict)
    roots: tuple[str, ...] = ("",)
    exclude: frozenset[str] = frozenset()
    renames: dict[str, str] = field(default_factory=dict)
    dates: tuple[str, ...] = ()
    exclude_pattern: Optional[Pattern[str]] = None


FORMATS: dict[str, FormatSpec] = {
    "jira-json": FormatSpec(
        "jira-json", jira_json.EXPECTED, jira_json.read_jira_json,
        core={"id": "key", "title": "fields.summary", "description": "fields.description",
              "product": "fields.project", "component": "fields.components", "created": "fields.created"},
        extra={"issue_id": "id"},
        roots=("", "fields"),
        exclude=frozenset({"self", "expand", "issuelinks", "comment", "attachment", "worklog", "subtasks"}),
        renames={"issuetype": "issue_type", "versions": "affects_versions", "resolutiondate": "resolved"},
        dates=("resolved", "updated", "duedate"),
    ),
    "jira-csv": FormatSpec(
        "jira-csv", jira_csv.EXPECTED, jira_csv.read_jira_csv,
        core={"id": "Issue key", "title": "Summary", "description": "Description", "product": "Project name",
              "component": "Component/s", "created": "Created"},
        exclude=frozenset({"Comment", "Attachment", "Log Work", "Watchers"}),
        exclude_pattern=re.compile(r"(?i)(inward|outward) issue link \(.+\)"),  # duplicates become pairs
        dates=("resolved", "updated", "due_date", "last_viewed"),
    ),
    "bugzilla-json": FormatSpec(
        "bugzilla-json", bugzilla_json.EXPECTED, bugzilla_json.read_bugzilla_json,
        core={"id": "id", "title": "summary", "description": "description", "product": "product",
              "component": "component", "created": "creation_time"},
        exclude=frozenset({"comments"}),
        dates=("last_change_time", "cf_last_resolved"),
    ),
    "github-json": FormatSpec(
        "github-json", github_json.EXPECTED, github_json.read_github_json,
        core={"id": "number", "title": "title", "description": "body", "product": None, "component": None,
              "created": "created_at"},
        extra={"issue_id": "id", "html_url": "html_url"},
        exclude=frozenset({"pull_request", "reactions", "url", "node_id", "comments"}),
        exclude_pattern=re.compile(r".+_url"),
        dates=("updated_at", "closed_at"),
    ),
    "jsonl": FormatSpec(
        "jsonl", jsonl.EXPECTED, jsonl.read_jsonl,
        core={"id": "id", "title": "title", "description": "description", "product": "product",
              "component": "component", "created": "created"},
        dates=("resolved", "updated"),
    ),
}
