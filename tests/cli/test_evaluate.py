from pathlib import Path

from typer.testing import CliRunner

from lmplatform.cli import app


def test_evaluate_validate_names_the_bad_field(tmp_path: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text(
        "tasks:\n  - task: retrieval\n    datasets: [{name: d, corpus: c.jsonl, relations: r.jsonl}]\n"
        "    retrievers: [{name: x, kind: dense}]\n"
    )
    result = CliRunner().invoke(app, ["evaluate", "validate", "--config", str(config)])
    assert result.exit_code == 2
    assert "kind=dense needs model" in result.output


def test_evaluate_run_missing_data_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'out'}\ntracking: {{enabled: false}}\ntasks:\n  - task: retrieval\n"
        "    datasets: [{name: d, corpus: /nonexistent/c.jsonl, relations: r.jsonl}]\n"
        "    retrievers: [{name: b, kind: bm25}]\n"
    )
    result = CliRunner().invoke(app, ["evaluate", "run", "--config", str(config), "--limit-queries", "5"])
    assert result.exit_code == 2
    assert "file not found: /nonexistent/c.jsonl" in result.output
