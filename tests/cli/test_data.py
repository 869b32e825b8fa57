"""`lmp data`: span-report on a crafted corpus with known token counts; pairs joined per split, and its bad rows
skipped and reported; import of a tracker export, its summary lines and its errors."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from lmplatform.cli import app


def test_span_report_counts_kept_and_dropped_per_max_span(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    # "error" is one token, so each document has exactly n tokens
    corpus.write_text("".join(json.dumps({"text": " ".join(["error"] * n)}) + "\n" for n in (10, 16, 40, 63, 64)))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"model: {{name_or_path: {tiny_bert}}}\n"
        f"data: {{train_paths: [{corpus}], validation_fraction: 0.0}}\n"
        "objective: {name: declutr}\n"
    )
    result = CliRunner().invoke(app, ["data", "span-report", "--config", str(config), "--max-span", "4", "16", "32"])
    assert result.exit_code == 0, result.output
    rows = [line.split("│")[1:-1] for line in result.output.splitlines() if line.startswith("│")]
    table = {int(r[1]): (int(r[2]), int(r[3]), int(r[4]), float(r[5])) for r in ([c.strip() for c in row] for row in rows)}
    assert table == {4: (16, 4, 1, 20.0), 16: (64, 1, 4, 80.0), 32: (128, 0, 5, 100.0)}

    bad = CliRunner().invoke(app, ["data", "span-report", "--config", str(config), "--max-span", "4", "x"])
    assert bad.exit_code != 0 and "positive integers" in bad.output


def test_pairs_joins_report_texts_per_split_with_groups_across_splits(tmp_path: Path) -> None:
    reports = [{"id": "1", "title": "Crash on save", "description": "Writer crashes"},
               {"id": "2", "title": "Save crashes", "description": ""},
               {"id": "3", "title": "Crash when saving", "description": "again"},
               {"id": "4", "title": "", "description": ""},
               {"id": "5", "title": "Font size", "description": "wrong in Calc"}]
    relations = [{"duplicate_id": "2", "master_id": "1", "split": "train"},
                 {"duplicate_id": "3", "master_id": "2", "split": "test"},  # its group reaches "1" through train
                 {"duplicate_id": "4", "master_id": "5", "split": "test"},  # "4" has no text
                 {"duplicate_id": "9", "master_id": "5", "split": "test"}]  # "9" is not a report
    corpus, links = tmp_path / "corpus.jsonl", tmp_path / "pairs.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in reports))
    links.write_text("".join(json.dumps(r) + "\n" for r in relations))
    out = tmp_path / "pairs"
    result = CliRunner().invoke(app, ["data", "pairs", "--corpus", str(corpus), "--relations", str(links), "--out", str(out),
                                      "--split", "train", "--split", "test"])
    assert result.exit_code == 0, result.output
    read = {split: [json.loads(line) for line in (out / f"{split}.jsonl").read_text().splitlines()]
            for split in ("train", "test")}
    assert read["train"] == [{"query": "Save crashes", "document": "Crash on save. Writer crashes", "group": "1"}]
    assert read["test"] == [{"query": "Crash when saving. again", "document": "Save crashes", "group": "1"}]
    assert "1 left out: an empty text" in result.output


def test_pairs_skips_and_reports_rows_that_are_not_json_or_not_unicode(tmp_path: Path, caplog) -> None:
    corpus, links = tmp_path / "corpus.jsonl", tmp_path / "pairs.jsonl"
    corpus.write_text("\n".join([
        json.dumps({"id": "1", "title": "Crash on save", "description": "Writer crashes"}),
        json.dumps({"id": "2", "title": "Save \ud800 crashes"}),  # a lone surrogate, escaped as JSON allows
        '{"id": "3", "title": "Crash\x00 on load"}',  # a raw control character: not JSON
        '{"id": "4", "title": "Crash when',  # cut off
        json.dumps({"id": "5", "title": "Crash\x00 when saving"}),  # escaped: valid JSON, valid Unicode, kept
    ]) + "\n")
    links.write_text("\n".join([json.dumps({"duplicate_id": q, "master_id": "1", "split": "train"}) for q in "2345"]
                               + ["not json"]) + "\n")
    out = tmp_path / "pairs"
    with caplog.at_level("WARNING"):
        result = CliRunner().invoke(app, ["data", "pairs", "--corpus", str(corpus), "--relations", str(links),
                                          "--out", str(out), "--split", "train"])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "1 pairs in 1 duplicate groups" in result.output
    lines = (out / "train.jsonl").read_bytes().decode("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [
        {"query": "Crash\x00 when saving", "document": "Crash on save. Writer crashes", "group": "1"}]
    assert f"skipped 4 bad rows, e.g. {corpus}:2: not valid Unicode (lone surrogate U+D800)" in caplog.text
    # The command's own output names every skipped row with its file and line, not only the log.
    assert "skipped 4 bad row(s)" in result.output
    assert f"{corpus}:2: not valid Unicode" in result.output and f"{links}:5:" in result.output


def test_import_writes_reports_and_pairs_and_prints_a_line_per_event(tmp_path: Path) -> None:
    from tests.data.trackers.exports import jira_issue, read_jsonl, write_json

    export = write_json(tmp_path / "export.json", {"issues": [
        jira_issue("HADOOP-1", 1, "2020-01-01T02:52:00.000+0000", inward=["HADOOP-2"]),
        jira_issue("HADOOP-2", 2, "2020-01-02T02:52:00.000+0000", outward=["HADOOP-1", "HADOOP-3"]),
        jira_issue("HADOOP-3", 3, "2020-01-03T02:52:00.000+0000", extra={"created": "soon"}),
        {"key": "HADOOP-4"}]})
    links = tmp_path / "links.jsonl"
    links.write_text(json.dumps({"id_a": "HADOOP-5", "id_b": "HADOOP-1"}) + "\n")
    out = tmp_path / "mytracker"
    result = CliRunner().invoke(app, ["data", "import", "--format", "jira-json", "--input", str(export), "--links", str(links),
                                      "--out", str(out), "--map", "title=fields.status.name", "--map", "kind=fields.issuetype",
                                      "--metadata", "priority", "--split", "group", "--fractions", "1,0,0"])
    assert result.exit_code == 0, result.output
    reports = read_jsonl(out / "reports.jsonl")
    assert reports[0] == {"id": "HADOOP-1", "title": "Resolved", "description": "", "product": "Hadoop Common",
                          "component": "fs, test", "created": "2020-01-01T02:52:00Z", "kind": "Bug", "priority": "Major"}
    assert read_jsonl(out / "pairs.jsonl") == [
        {"duplicate_id": "HADOOP-2", "master_id": "HADOOP-1", "group": "HADOOP-1", "split": "train"},
        {"duplicate_id": "HADOOP-3", "master_id": "HADOOP-1", "group": "HADOOP-1", "split": "train"}]
    lines = result.output.splitlines()
    assert lines[0] == "read 4 record(s) from 1 file(s) as jira-json: kept 3 report(s), skipped 1"
    not_jira = "not a Jira issue (no 'fields' object)"
    assert f"skipped 1: {not_jira} (e.g. {export}: item 4: {not_jira})" in lines
    assert any(line.startswith(f"dates: created unknown for 1 of 3 (0 missing, 1 not parsed, e.g. {export}: issue HADOOP-3: "
                               "created: 'soon' is not a time") for line in lines)
    assert any(line.startswith("links: 4 read, 2 distinct between reports, 1 to unknown reports (e.g. ") for line in lines)
    assert "groups: 1 duplicate group(s) of 3 report(s)" in lines
    assert "pairs: train 2, dev 0, test 0 (whole groups by sha256, seed 0)" in lines
    assert lines[-1] == f"wrote {out / 'reports.jsonl'}, {out / 'pairs.jsonl'}, {out / 'import_summary.json'}"
    # the pairs are what `lmp data pairs` reads
    pairs = CliRunner().invoke(app, ["data", "pairs", "--corpus", str(out / "reports.jsonl"), "--relations",
                                     str(out / "pairs.jsonl"), "--out", str(tmp_path / "p"), "--field", "title",
                                     "--split", "train"])
    assert pairs.exit_code == 0 and "2 pairs in 1 duplicate groups" in pairs.output, pairs.output


def test_import_refuses_a_file_in_another_format_and_bad_options_in_one_line(tmp_path: Path) -> None:
    export = tmp_path / "bugs.json"
    export.write_text(json.dumps({"bugs": [{"id": 1, "summary": "x", "creation_time": "2020-01-02T17:14:21Z"}]}))
    run = CliRunner().invoke
    result = run(app, ["data", "import", "-f", "github-json", "-i", str(export), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "error:" in result.output and str(export) in result.output
    assert "github-json" in result.output and "Traceback" not in result.output
    result = run(app, ["data", "import", "-f", "redmine", "-i", str(export), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "format: Input should be 'jira-json'" in result.output
    result = run(app, ["data", "import", "-f", "bugzilla-json", "-i", str(export), "-o", str(tmp_path / "o"), "--map", "title"])
    assert result.exit_code == 2 and "expected FIELD=SOURCE_PATH" in result.output
    result = run(app, ["data", "import", "-f", "bugzilla-json", "-i", str(export), "-o", str(tmp_path / "o"),
                       "--fractions", "0.5,0.5,0.5"])
    assert result.exit_code == 2 and "split fractions must sum to 1" in result.output


def test_import_reads_ambiguous_epoch_times_once_the_unit_is_given(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": "t", "created": 50_000_000_000 + i}) + "\n" for i in (1, 2)))
    run = CliRunner().invoke
    result = run(app, ["data", "import", "-f", "jsonl", "-i", str(corpus), "-o", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "dates: created unknown for 2 of 2 (0 missing, 2 not parsed, e.g. " in result.output
    assert "created: 50000000001 is ambiguous epoch time" in result.output
    result = run(app, ["data", "import", "-f", "jsonl", "-i", str(corpus), "-o", str(tmp_path / "s"), "--epoch-unit", "ms"])
    assert result.exit_code == 0 and "dates: created" not in result.output, result.output
    assert json.loads((tmp_path / "s" / "reports.jsonl").read_text().splitlines()[0])["created"] == "1971-08-02T16:53:20Z"


def test_import_reads_the_date_and_link_fields_it_is_told(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"report {i}", "created": f"2020-01-0{i}T00:00:00Z",
                                          "closed": f"0{i}/Feb/20 02:52"}) + "\n" for i in (1, 2, 3)))
    links = tmp_path / "links.jsonl"
    links.write_text(json.dumps({"dup": "2", "of": "1"}) + "\n" + json.dumps({"dup": "3", "of": "1"}) + "\n")
    run = CliRunner().invoke
    plain = run(app, ["data", "import", "-f", "jsonl", "-i", str(corpus), "--links", str(links), "-o", str(tmp_path / "a")])
    assert plain.exit_code == 0, plain.output
    assert json.loads((tmp_path / "a" / "reports.jsonl").read_text().splitlines()[0])["closed"] == "01/Feb/20 02:52"
    assert "no link fields" in plain.output and not (tmp_path / "a" / "pairs.jsonl").read_text().strip()
    told = run(app, ["data", "import", "-f", "jsonl", "-i", str(corpus), "--links", str(links), "-o", str(tmp_path / "b"),
                     "--date-field", "closed", "--link-fields", "dup, of", "--split", "group", "--fractions", "1,0,0"])
    assert told.exit_code == 0, told.output
    assert json.loads((tmp_path / "b" / "reports.jsonl").read_text().splitlines()[0])["closed"] == "2020-02-01T02:52:00Z"
    pairs = [json.loads(line) for line in (tmp_path / "b" / "pairs.jsonl").read_text().splitlines()]
    assert [(p["duplicate_id"], p["master_id"]) for p in pairs] == [("2", "1"), ("3", "1")]
    bad = run(app, ["data", "import", "-f", "jsonl", "-i", str(corpus), "-o", str(tmp_path / "c"), "--link-fields", "dup"])
    assert bad.exit_code == 2 and "--link-fields 'dup': expected two field names" in bad.output
