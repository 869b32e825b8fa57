"""A whole import: JSONL reports with a links file, skipped rows and times counted with their reasons, ambiguous
epoch times refused naming the field (and read with a unit), the time and the group split, and the project's own
OpenOffice data where this machine has it."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from lmplatform.data.fields import parse_time
from lmplatform.data.readers import DataError
from lmplatform.data.trackers import TrackerImportConfig, import_tracker
from tests.conftest import SHARED_DATA
from tests.data.trackers.exports import read_jsonl, write_jsonl

DAY = 86_400


def _reports(tmp_path: Path, created: dict[str, object]) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", [{"id": k, "title": f"Report {k}", "description": "", "created": v,
                                                    "severity": "minor"} for k, v in created.items()])


def test_jsonl_with_links_counts_every_skipped_row_and_unknown_time(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": 1, "title": "Crash", "description": "on save", "created": "2000-10-25 10:37:00 +0000", "product": "Writer",
         "component": "ui", "votes": 3, "tags": ["a", "b"], "nested": {"x": 1}, "resolved": 972_470_220_000},
        {"id": "2", "title": "Crash again", "created": 972_500_000},
        "{broken",
        ["not", "an", "object"],
        {"title": "no id"},
        {"id": "1", "title": "the same id again"},
        {"id": "3", "title": "When?", "created": "next week"},
        {"id": "4", "title": "Bad \ud800 text"},
        {"id": "5", "title": "", "description": "", "created": ""},
    ])
    links = write_jsonl(tmp_path / "links.jsonl", [
        {"duplicate_id": "2", "master_id": "1"}, {"id_a": "3", "id_b": "2"}, {"duplicate_id": "9", "master_id": "1"},
        {"from": "1", "to": "2"}, "nope"])
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(corpus)], links=[str(links)],
                                                 out=str(tmp_path / "out")))
    reports = read_jsonl(tmp_path / "out" / "reports.jsonl")
    assert [r["id"] for r in reports] == ["1", "2", "3", "5"]  # by created, unknown times last
    assert reports[0] == {"id": "1", "title": "Crash", "description": "on save", "product": "Writer", "component": "ui",
                          "created": "2000-10-25T10:37:00Z", "votes": 3, "tags": "a, b",
                          "resolved": "2000-10-25T10:37:00Z"}  # epoch ms read; a nested object is no metadata
    assert reports[2]["created"] == "" and reports[3]["created"] == ""
    assert summary.records_read == 9 and summary.reports_kept == 4 and summary.reports_without_text == 1
    skipped = summary.skipped.to_dict()
    assert skipped == {
        "duplicate id": {"count": 1, "examples": [f"{corpus}:6: id '1' was read before at {corpus}:1"]},
        "expected a JSON object, got list": {"count": 1, "examples": [f"{corpus}:4: expected a JSON object, got list"]},
        "no id": {"count": 1, "examples": [f"{corpus}:5: 'id' missing or empty"]},
        "not valid JSON": {"count": 1, "examples": [f"{corpus}:3: not valid JSON (Expecting property name enclosed in "
                                                    "double quotes at column 2)"]},
        "not valid Unicode": {"count": 1, "examples": [f"{corpus}:8: not valid Unicode (lone surrogate U+D800)"]},
    }
    assert summary.dates["created"]["missing"] == 1 and summary.dates["created"]["unparsed"] == 1
    assert summary.dates["created"]["examples"][0].startswith(f"{corpus}:7: created: 'next week' is not a time")
    assert summary.links["unknown"]["link to an unknown report"]["examples"] == [f"{links}:3: 9 - 1: '9' is no report read"]
    assert summary.links["rows_skipped"]["no link fields"]["examples"] == [
        f"{links}:4: no duplicate_id/master_id or id_a/id_b"]
    assert summary.unplaced.to_dict() == {"created unknown, so it cannot be placed in time": {
        "count": 1, "examples": [f"{corpus}:7: duplicate 3"]}}
    written = json.loads((tmp_path / "out" / "import_summary.json").read_text())
    assert written["records"] == {"read": 9, "kept": 4, "skipped": 5, "kept_without_text": 1}
    assert written["pairs"] == {"train": 1, "dev": 0, "test": 0, "total": 1}
    lines = summary.lines()
    assert lines[0] == "read 9 record(s) from 1 file(s) as jsonl: kept 4 report(s), skipped 5 (1 kept have no title or " \
                       "description)"
    assert f"skipped 1: no id (e.g. {corpus}:5: 'id' missing or empty)" in lines
    assert any(line.startswith("dates: created unknown for 2 of 4 (1 missing, 1 not parsed, e.g.") for line in lines)
    assert "groups: 1 duplicate group(s) of 3 report(s)" in lines
    assert "pairs: train 1 (created 2000-10-25T18:53:20Z to 2000-10-25T18:53:20Z), dev 0, test 0" in lines
    assert lines[-1] == f"wrote {tmp_path / 'out' / 'reports.jsonl'}, {tmp_path / 'out' / 'pairs.jsonl'}, " \
                        f"{tmp_path / 'out' / 'import_summary.json'}"


def test_ambiguous_epoch_times_are_refused_naming_the_field_and_read_with_a_unit(tmp_path: Path) -> None:
    corpus = _reports(tmp_path, {"1": 50_000_000_000, "2": 50_000_000_000 + DAY * 1000})
    write_jsonl(tmp_path / "links.jsonl", [{"id_a": "1", "id_b": "2"}])
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(corpus)], links=[str(tmp_path / "links.jsonl")],
                                                 out=str(tmp_path / "auto")))
    assert summary.dates["created"]["unparsed"] == 2
    assert summary.dates["created"]["examples"][0] == (
        f"{corpus}:1: created: 50000000000 is ambiguous epoch time: neither plausible seconds (below 1e10) nor "
        "milliseconds (1e11 to 1e14); give the unit (epoch unit 's' or 'ms')")
    assert summary.pairs == {"train": 0, "dev": 0, "test": 0} and summary.unplaced.total == 1
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(corpus)], links=[str(tmp_path / "links.jsonl")],
                                                 out=str(tmp_path / "ms"), epoch_unit="ms"))
    assert [r["created"] for r in read_jsonl(tmp_path / "ms" / "reports.jsonl")] == ["1971-08-02T16:53:20Z",
                                                                                    "1971-08-03T16:53:20Z"]
    assert summary.pairs["train"] == 1


def test_the_time_split_trains_on_the_oldest_duplicates_and_tests_on_the_newest(tmp_path: Path) -> None:
    # 5 groups of a master and two duplicates, filed over 15 days, listed in no particular order
    created = {f"{g}{i}": f"2021-01-{1 + 3 * int(g) + i:02d}T00:00:00Z" for g in "01234" for i in range(3)}
    corpus = _reports(tmp_path, dict(reversed(list(created.items()))))
    links = write_jsonl(tmp_path / "links.jsonl", [{"duplicate_id": f"{g}0", "master_id": f"{g}{i}"}  # master -> dups
                                                   for g in "01234" for i in (1, 2)])
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(corpus)], links=[str(links)],
                                                 out=str(tmp_path / "out")))
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert {p["master_id"] for p in pairs} == {f"{g}0" for g in "01234"}  # the earliest, whatever the links say
    order = sorted(pairs, key=lambda p: created[p["duplicate_id"]])
    assert [p["split"] for p in order] == ["train"] * 6 + ["dev"] * 2 + ["test"] * 2
    assert summary.split["train_until"] == created["22"] and summary.split["dev_until"] == created["32"]
    assert summary.pairs == {"train": 6, "dev": 2, "test": 2}
    assert ("pairs: train 6 (created 2021-01-02T00:00:00Z to 2021-01-09T00:00:00Z), dev 2 (created 2021-01-11T00:00:00Z "
            "to 2021-01-12T00:00:00Z), test 2 (created 2021-01-14T00:00:00Z to 2021-01-15T00:00:00Z)") in summary.lines()


def test_the_group_split_keeps_every_group_whole(tmp_path: Path) -> None:
    created = {f"{g}-{i}": g * DAY + i for g in range(60) for i in range(1 + g % 3)}
    corpus = _reports(tmp_path, created)
    links = write_jsonl(tmp_path / "links.jsonl", [{"id_a": f"{g}-0", "id_b": f"{g}-{i}"} for g in range(60)
                                                   for i in range(1, 1 + g % 3)])
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(corpus)], links=[str(links)],
                                                 out=str(tmp_path / "out"), split="group", seed=3))
    splits = defaultdict(set)
    for pair in read_jsonl(tmp_path / "out" / "pairs.jsonl"):
        splits[pair["group"]].add(pair["split"])
    assert len(splits) == 40 and all(len(s) == 1 for s in splits.values())
    assert {s for group in splits.values() for s in group} == {"train", "dev", "test"}
    assert summary.split["rule"] == "group" and summary.split["seed"] == 3


def test_an_import_that_keeps_no_report_is_refused(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"title": "no id"}])
    with pytest.raises(DataError, match="no report read from .* as jsonl"):
        import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(corpus)], out=str(tmp_path / "out")))
    with pytest.raises(DataError, match="data file not found"):
        import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(tmp_path / "none.jsonl")], out=str(tmp_path / "o")))


def test_the_config_refuses_bad_fractions_and_mappings() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="split fractions must sum to 1"):
        TrackerImportConfig(format="jsonl", inputs=["x"], out="o", fractions={"train": 0.5, "dev": 0.2, "test": 0.2})
    with pytest.raises(ValidationError, match="only id, title, description, product, component, created may be empty"):
        TrackerImportConfig(format="jsonl", inputs=["x"], out="o", mapping={"severity": ""})
    with pytest.raises(ValidationError, match="format"):
        TrackerImportConfig(format="redmine", inputs=["x"], out="o")


OPENOFFICE = SHARED_DATA / "duplicate_bug_reports" / "openoffice"


@pytest.mark.skipif(not (OPENOFFICE / "pairs.jsonl").is_file(), reason="no OpenOffice data on this machine")
def test_the_openoffice_corpus_imports_whole(tmp_path: Path) -> None:
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(OPENOFFICE / "corpus.jsonl")],
                                                 links=[str(OPENOFFICE / "pairs.jsonl")], out=str(tmp_path / "out")))
    assert summary.reports_kept == 4_548 and summary.skipped.total == 0 and summary.dates["created"]["known"] == 4_548
    reports = {r["id"]: r for r in read_jsonl(tmp_path / "out" / "reports.jsonl")}
    pairs = read_jsonl(tmp_path / "out" / "pairs.jsonl")
    assert len(reports) == 4_548 and len(pairs) == 4_548 - summary.groups
    for pair in pairs:  # every duplicate filed after (or with) its master
        assert parse_time(reports[pair["duplicate_id"]]["created"], "c") >= parse_time(reports[pair["master_id"]]["created"], "c")
    train = [parse_time(reports[p["duplicate_id"]]["created"], "c") for p in pairs if p["split"] == "train"]
    test = [parse_time(reports[p["duplicate_id"]]["created"], "c") for p in pairs if p["split"] == "test"]
    assert max(train) < min(test) and summary.pairs["train"] > summary.pairs["test"] > 0
