"""`lmp behavioural run` end to end with a saved tiny classifier."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from lmplatform.cli import app


def test_run_suite_on_a_saved_classifier_and_reject_a_bad_suite(tiny_bert: Path, tmp_path: Path) -> None:
    import torch

    from lmplatform.models.classifier import ClassifierModel, MLPHead
    from lmplatform.models.encoder import Encoder

    torch.manual_seed(0)
    folder = ClassifierModel(Encoder.from_pretrained(tiny_bert), MLPHead(32, 2, hidden=8),
                             ["network", "storage"]).save_pretrained(tmp_path / "clf")
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "cli", "tests": [
        {"name": "inv", "type": "invariance", "pairs": [["vpn down", "vpn down"]]},  # identical texts: must pass
        {"name": "emb", "type": "embedding",
         "triples": [{"anchor": "disk full", "positive": "disk full", "negative": "vpn tunnel"}]},
    ]}))
    runner = CliRunner()
    result = runner.invoke(app, ["behavioural", "run", str(suite), "--classifier", str(folder), "--out", str(tmp_path / "out"),
                                 "--max-failure-rate", "0"])
    assert result.exit_code == 0, result.output
    assert "| inv | invariance | 1 | 0 | 0.0% |" in result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["summary"]["failures"] == 0 and report["summary"]["skipped"] == 0

    suite.write_text(yaml.safe_dump({"name": "bad", "tests": [{"name": "m", "type": "mft", "examples": []}]}))
    result = runner.invoke(app, ["behavioural", "run", str(suite), "--classifier", str(folder)])
    assert result.exit_code == 2 and "test 'm' (#1): field 'examples'" in result.output
