"""Jira's CSV export: repeated columns all read, multi-line descriptions, Jira's dates, duplicate link columns
both ways; a row that does not fit the header skipped with its line; another file's header refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.data.trackers import TrackerImportConfig, import_tracker
from tests.data.trackers.exports import JIRA_CSV_HEADER, jira_csv_row, read_jsonl, write_csv


def test_jira_csv_reads_repeated_columns_dates_and_links(tmp_path: Path) -> None:
    rows = [
        jira_csv_row("Update the year to 2020", "HADOOP-1", 13277068, "01/Jan/20 02:52",
                     description="Update the year\n\nto 2020, \"quoted\"", components=("fs", "build"),
                     resolved="02/Jan/20 4:30 PM"),
        jira_csv_row("Year again", "HADOOP-2", 13277069, "01/Jan/20 2:53 PM", outward=("HADOOP-1",)),
        jira_csv_row("Year, third", "HADOOP-3", 13277070, "05/jan/2020 10:00:30", inward="HADOOP-2"),
        jira_csv_row("Unknown time", "HADOOP-4", 13277071, "yesterday", outward=("HADOOP-1", "HADOOP-77")),
    ]
    export = write_csv(tmp_path / "jira.csv", JIRA_CSV_HEADER, rows)
    summary = import_tracker(TrackerImportConfig(format="jira-csv", inputs=[str(export)], out=str(tmp_path / "out")))
    reports = {r["id"]: r for r in read_jsonl(tmp_path / "out" / "reports.jsonl")}
    assert reports["HADOOP-1"] == {
        "id": "HADOOP-1", "title": "Update the year to 2020", "description": "Update the year\n\nto 2020, \"quoted\"",
        "product": "Hadoop Common", "component": "fs, build", "created": "2020-01-01T02:52:00Z",
        "issue_id": "13277068", "issue_type": "Bug", "status": "Resolved", "project_key": "HADOOP",
        "priority": "Major", "resolution": "Duplicate", "updated": "2020-01-02T16:30:00Z",
        "resolved": "2020-01-02T16:30:00Z", "affects_versions": "3.2.1",
    }
    assert reports["HADOOP-2"]["created"] == "2020-01-01T14:53:00Z" and reports["HADOOP-3"]["created"] == "2020-01-05T10:00:30Z"
    assert reports["HADOOP-4"]["created"] == ""  # kept, its time unknown and counted
    assert summary.dates["created"]["missing"] == 0 and summary.dates["created"]["unparsed"] == 1
    assert summary.dates["created"]["examples"] == [f"{export}:7: created: 'yesterday' is not a time (accepted: "
                                                    + summary.dates["created"]["examples"][0].split("(accepted: ")[1]]
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert sorted((p["duplicate_id"], p["master_id"]) for p in pairs) == [("HADOOP-2", "HADOOP-1"), ("HADOOP-3", "HADOOP-1")]
    assert summary.groups == 1 and summary.reports_in_groups == 4  # HADOOP-4 is in the group, but has no time:
    assert summary.unplaced.total == 1  # the time split cannot place it
    assert summary.links["unknown"]["link to an unknown report"]["examples"] == [
        f"{export}:7: HADOOP-4 - HADOOP-77: 'HADOOP-77' is no report read"]


def test_a_row_that_does_not_fit_the_header_is_skipped_with_its_line(tmp_path: Path) -> None:
    good = jira_csv_row("One", "X-1", 1, "01/Jan/20 02:52", description="two\nlines")
    export = write_csv(tmp_path / "jira.csv", JIRA_CSV_HEADER, [good, good[:5], [""] * 3, good[:1] + ["X-2"] + good[2:]])
    summary = import_tracker(TrackerImportConfig(format="jira-csv", inputs=[str(export)], out=str(tmp_path / "out")))
    assert summary.reports_kept == 2 and summary.records_read == 3  # the empty row is no record
    assert summary.skipped.to_dict() == {"cells do not match the header": {
        "count": 1, "examples": [f"{export}:4: 5 cells, the header has {len(JIRA_CSV_HEADER)}"]}}


def test_a_file_whose_header_is_not_jiras_is_refused(tmp_path: Path) -> None:
    other = write_csv(tmp_path / "bugs.csv", ["bug_id", "short_desc"], [["1", "x"]])
    with pytest.raises(DataError, match=rf"{other}: not jira-csv: Jira's CSV export"):
        import_tracker(TrackerImportConfig(format="jira-csv", inputs=[str(other)], out=str(tmp_path / "out")))


def test_bytes_that_are_not_utf8_skip_only_their_row(tmp_path: Path) -> None:
    export = write_csv(tmp_path / "jira.csv", JIRA_CSV_HEADER, [jira_csv_row("One", "X-1", 1, "01/Jan/20 02:52"),
                                                                 jira_csv_row("Caf\x00", "X-2", 2, "01/Jan/20 02:52")])
    export.write_bytes(export.read_bytes().replace(b"Caf\x00", b"Caf\xe9"))  # Latin-1 in a UTF-8 file
    summary = import_tracker(TrackerImportConfig(format="jira-csv", inputs=[str(export)], out=str(tmp_path / "out")))
    assert summary.reports_kept == 1
    assert summary.skipped.to_dict()["not valid UTF-8"]["examples"] == [f"{export}:3: not valid UTF-8 (byte 0xe9)"]
