"""`lmp data`: look at a run's corpus before training (bad rows, splits; DeCLUTR's sampleable documents per span)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.cli.common import RunConfigSetOption, fail, user_errors

DEFAULT_MAX_SPANS = [4, 8, 16, 32, 64, 128]

app = typer.Typer(no_args_is_help=True, help="Inspect corpora before training.")


@app.command("report")
def data_report(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = RunConfigSetOption,
) -> None:
    """Scan a run's corpus: rows, bad rows with file and line, duplicates, split sizes."""
    from lmplatform.config.loader import load_run_config
    from lmplatform.data.corpus import scan_corpus

    try:
        cfg = load_run_config(config, overrides or [])
        report = scan_corpus(cfg.data, use_ray=False).report
    except user_errors() as exc:
        fail(str(exc))
        return
    typer.echo(report.summary())



@app.command("span-report", context_settings={"allow_extra_args": True})
def span_report_command(
    ctx: typer.Context,
    config: Path = typer.Option(..., "--config", "-c", help="Run config YAML (its data and model sections are used)."),
    max_span: Optional[List[int]] = typer.Option(
        None, "--max-span", help="Max span lengths to report (repeatable; space-separated values also work)."
    ),
    num_anchors: Optional[int] = typer.Option(None, help="Anchors per document (default: objective.num_anchors, else 2)."),
    overrides: Optional[List[str]] = RunConfigSetOption,
) -> None:
    """Documents kept and dropped by DeCLUTR's 2 x num_anchors x max_span minimum length, per max span."""
    from rich.console import Console
    from rich.table import Table

    from lmplatform.config.loader import load_run_config
    from lmplatform.data.corpus import scan_corpus
    from lmplatform.models.encoder import load_tokenizer
    from lmplatform.objectives.declutr.spans import span_report

    try:
        cfg = load_run_config(config, overrides or [])
        anchors = num_anchors or getattr(cfg.objective, "num_anchors", 2)
        spans = sorted(set((max_span or []) + _extra_spans(ctx.args)) or DEFAULT_MAX_SPANS)
        corpus = scan_corpus(cfg.data, use_ray=False)
        report = span_report(corpus, load_tokenizer(cfg.model.name_or_path), anchors, spans)
    except user_errors() as exc:
        fail(str(exc))
        return
    table = Table(title=f"DeCLUTR samples per max span ({anchors} anchor(s) per document)")
    for column in ("split", "max span", "min tokens", "kept", "dropped", "dropped %"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for split, rows in report.items():
        for row in rows:
            table.add_row(split, str(row.max_span), str(row.min_tokens), str(row.kept), str(row.dropped),
                          f"{100 * row.dropped_fraction:.1f}")
    Console(width=100).print(table)


def _extra_spans(args: list[str]) -> list[int]:
    """`--max-span 4 8 16`: typer takes the first value; the rest arrive as extra arguments."""
    spans = []
    for arg in args:
        if not arg.isdigit() or int(arg) < 1:
            raise typer.BadParameter(f"unexpected argument {arg!r}; --max-span takes positive integers")
        spans.append(int(arg))
    return spans

