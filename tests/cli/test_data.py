"""`lmp data`: span-report on a crafted corpus with known token counts; pairs joined per split, and its bad rows
skipped and reported."""
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
