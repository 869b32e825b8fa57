"""`lmp data span-report` on a crafted corpus with known token counts."""
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
