"""`lmp data`: look at a run's corpus before training (bad rows, splits; DeCLUTR's sampleable documents per span),
and turn a duplicate-report dataset (reports + relations) into training pair files."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.cli.common import RunConfigSetOption, fail, user_errors
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset
from lmplatform.evaluation.tasks.retrieval.data import write_split_pairs
from lmplatform.objectives.run_config import load_run_config

DEFAULT_MAX_SPANS = [4, 8, 16, 32, 64, 128]

app = typer.Typer(no_args_is_help=True, help="Inspect corpora before training; build pair files.")


@app.command("report")
def data_report(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = RunConfigSetOption,
) -> None:
    """Scan a run's corpus: rows, bad rows with file and line, duplicates, split sizes."""
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



@app.command("pairs")
def pairs_command(
    corpus: Path = typer.Option(..., "--corpus", help="JSONL of reports, one object per line."),
    relations: Path = typer.Option(..., "--relations", help="JSONL of duplicate pairs (query id -> target id)."),
    out: Path = typer.Option(..., "--out", help="Folder for <split>.jsonl (query, document, group)."),
    splits: List[str] = typer.Option(["train", "dev", "test"], "--split", help="Splits to write (repeatable)."),
    fields: List[str] = typer.Option(["title", "description"], "--field", help="Report fields joined into a text (repeatable)."),
    id_field: str = typer.Option("id", "--id-field"),
    query_id_field: str = typer.Option("duplicate_id", "--query-id-field"),
    target_id_field: str = typer.Option("master_id", "--target-id-field"),
    split_field: str = typer.Option("split", "--split-field", help="Field of the relation rows naming the split."),
) -> None:
    """Pair files for the bi-encoder and cross-encoder: one row per duplicate relation of each split, with the
    duplicate group (over all splits) in `group`, for data.group_field."""
    dataset = RetrievalDataset(name="pairs", corpus=str(corpus), relations=str(relations), id_field=id_field,
                               query_id_field=query_id_field, target_id_field=target_id_field, split_field=split_field)
    try:
        written = write_split_pairs(dataset, out, fields, splits)
    except user_errors() as exc:
        fail(str(exc))
        return
    for pairs in written.values():
        typer.echo(f"{pairs.path}: {pairs.pairs} pairs in {pairs.groups} duplicate groups "
                   f"({pairs.empty} left out: an empty text)")
    bad_rows = next(iter(written.values())).bad_rows if written else []  # every split reads the same two files
    if bad_rows:
        typer.echo(f"skipped {len(bad_rows)} bad row(s) of the corpus and relations files:")
        for row in bad_rows[:20]:
            typer.echo(f"  {row}")
        if len(bad_rows) > 20:
            typer.echo(f"  ... and {len(bad_rows) - 20} more")
