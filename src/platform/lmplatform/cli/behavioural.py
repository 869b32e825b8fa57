"""`lmp behavioural`: run CheckList-style suites against a saved classifier and/or encoder."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True, help="Behavioural tests (MFT, invariance, directional, embedding).")


@app.command("run")
def run(
    suite: Path = typer.Argument(..., help="Suite YAML, e.g. configs/behavioural/starter.yaml."),
    classifier: Optional[str] = typer.Option(None, help="Saved TextClassifier folder (classifier_head.pt + labels.json)."),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder, 'default' or models:/name@alias (embedding tests)."),
    out: Optional[Path] = typer.Option(None, help="Write report.json and report.md into this folder."),
    max_failure_rate: Optional[float] = typer.Option(None, help="Exit 1 when any test fails more often than this (CI gate)."),
) -> None:
    """Run a suite; prints the per-test failure rates and failing examples as Markdown."""
    from lmplatform.cli.common import fail
    from lmplatform.evaluation.behavioural import SuiteError, load_suite, report_markdown, run_suite

    try:
        parsed = load_suite(suite)  # a bad suite fails before any model is loaded
        text_classifier = encoder_model = None
        if classifier:
            from lmplatform.models.classifier import TextClassifier

            text_classifier = TextClassifier.from_pretrained(classifier)
        if encoder:
            from lmplatform.models.encoder import Encoder

            encoder_model = Encoder.from_pretrained(encoder)
        elif text_classifier is not None:
            encoder_model = text_classifier.model.encoder
        report = run_suite(parsed, text_classifier, encoder_model)
    except (SuiteError, FileNotFoundError) as exc:
        fail(str(exc))
        return
    markdown = report_markdown(report)
    typer.echo(markdown)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
        (out / "report.md").write_text(markdown)
    rates = [r["failure_rate"] for r in report["tests"] if r["failure_rate"] is not None]
    if max_failure_rate is not None and any(rate > max_failure_rate for rate in rates):
        raise typer.Exit(1)
