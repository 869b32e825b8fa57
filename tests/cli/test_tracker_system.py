"""`lmp pipeline tracker`: its options become the import config, the recipe's overrides and the serve request
(`--check` prints them as the plan), and a bad option fails naming its field with nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lmplatform.cli import app
from tests.pipeline.test_tracker_system import REPO, tracker_export

RECIPE = REPO / "configs" / "pipelines" / "tracker_system.yaml"


def _check(tmp_path: Path, *options: str) -> tuple[list[str], dict]:
    export = tracker_export(tmp_path / "export.json")
    result = CliRunner().invoke(app, ["pipeline", "tracker", "--format", "jira-json", "--input", str(export),
                                      "--config", str(RECIPE), "--check", *options])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("{")
    return lines[:start], json.loads("\n".join(lines[start:]))


def test_the_options_become_the_import_the_overrides_and_the_serve_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMP_HOME", str(tmp_path / "home"))
    links = tmp_path / "links.jsonl"
    links.write_text('{"duplicate_id": "HADOOP-3", "master_id": "HADOOP-2"}\n')
    lines, plan = _check(tmp_path, "--name", "acme", "--links", str(links), "--map", "title=fields.summary",
                         "--map", "team=fields.reporter.name", "--metadata", "team", "--split", "group",
                         "--fractions", "0.5,0.3,0.2", "--seed", "7", "--epoch-unit", "ms",
                         "--set", "stages.biencoder.run.optim.epochs=2", "--set", "tracking.experiment=acme",
                         "--serve-set", "limits.max_k=50", "--port", "8123", "--serve-route-prefix", "/acme")
    root = tmp_path / "home" / "runs" / "data" / "acme"
    assert plan["import"] == {
        "format": "jira-json", "inputs": [str(tmp_path / "export.json")], "links": [str(links)], "out": str(root),
        "mapping": {"title": "fields.summary", "team": "fields.reporter.name"}, "metadata": ["team"],
        "date_fields": None, "link_fields": None, "split": "group", "fractions": {"train": 0.5, "dev": 0.3, "test": 0.2},
        "seed": 7, "epoch_unit": "ms"}
    stages = {s["name"]: s for s in plan["pipeline"]["stages"]}
    assert stages["data"]["pairs"]["corpus"] == f"{root}/reports.jsonl"
    assert stages["system"]["system"]["register_as"]["name"] == "acme" and plan["registers"] == "acme"
    assert stages["biencoder"]["run"]["optim"]["epochs"] == 2 and plan["pipeline"]["tracking"]["experiment"] == "acme"
    assert plan["serve"] == {"config": str(REPO / "serve" / "config.yaml"), "overrides": ["limits.max_k=50"],
                             "port": 8123, "detach": False, "route_prefix": "/acme"}
    assert lines == [
        f"import: jira-json {tmp_path / 'export.json'} with links {links} -> {root} (split group 0.5/0.3/0.2)",
        "pipeline: tracker_system: data, negatives, biencoder, system; stage system registers acme",
        f"serve: the version it registers, with {REPO / 'serve' / 'config.yaml'} on port 8123 under /acme, until stopped"]
    assert not (tmp_path / "home").exists()


def test_data_out_and_no_serve(tmp_path: Path) -> None:
    _, plan = _check(tmp_path, "--name", "acme", "--data-out", str(tmp_path / "mine"), "--no-serve")
    assert plan["import"]["out"] == str(tmp_path / "mine") and plan["serve"] is None
    assert not (tmp_path / "mine").exists()


@pytest.mark.parametrize("options, named", [
    (["--format", "jira-xml"], "import.format: Input should be 'jira-json'"),
    (["--input", "missing.json"], "import.inputs: data file not found: missing.json"),
    (["--fractions", "0.5,0.5,0.5"], "import.fractions: Value error, split fractions must sum to 1"),
    (["--map", "summary"], "--map 'summary': expected FIELD=SOURCE_PATH"),
    (["--set", "stages.biencoder.run.optim.epochs=many"], "optim.epochs"),
    (["--set", "vars.data_root=/x"], "vars.data_root is set by the job"),
    (["--serve-set", "batching.max_batch_size=1"], "batching.max_batch_size"),
    (["--serve-set", "limits"], "--serve-set 'limits': expected section.field=value, e.g. --serve-set limits.max_k=50"),
    (["--serve-set", "limits.max_k.x=1"], "--serve-set 'limits.max_k.x=1': limits.max_k is a value, not a section"),
    (["--serve-set", "model=elsewhere"], "model is set by the job"),
    (["--detach"], "detach: needs a Ray cluster"),
    (["--link-fields", "dup"], "--link-fields 'dup': expected two field names"),
])
def test_a_bad_option_fails_naming_its_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             options: list[str], named: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMP_HOME", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    export = tracker_export(tmp_path / "export.json")
    base = {"--format": "jira-json", "--input": str(export), "--name": "acme", "--config": str(RECIPE)}
    for flag in ("--format", "--input"):
        if flag in options:
            base.pop(flag)
    result = CliRunner().invoke(app, ["pipeline", "tracker", *[x for kv in base.items() for x in kv], *options])
    assert result.exit_code == 2 and named in " ".join(result.output.split()), result.output
    assert [p.name for p in tmp_path.iterdir()] == ["export.json"]
