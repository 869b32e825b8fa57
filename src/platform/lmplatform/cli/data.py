"""`lmp data`: import a bug tracker's export (reports, duplicate pairs with splits), look at a run's corpus before
training (bad rows, splits; DeCLUTR's sampleable documents per span), and turn a duplicate-report dataset
(reports + relations) into training pair files."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from pydantic import ValidationError

from lmplatform.cli.common import RunConfigSetOption, fail, user_errors
from lmplatform.data.trackers import TrackerImportConfig, import_tracker
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset
from lmplatform.evaluation.tasks.retrieval.data import write_split_pairs
from lmplatform.objectives.run_config import load_run_config

DEFAULT_MAX_SPANS = [4, 8, 16, 32, 64, 128]

app = typer.Typer(no_args_is_help=True, help="Import a tracker's export; inspect corpora before training; build pair files.")


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


@app.command("import")
def import_command(
    fmt: str = typer.Option(..., "--format", "-f",
                               help="jira-json, jira-csv, bugzilla-json, github-json or jsonl."),
    inputs: List[Path] = typer.Option(..., "--input", "-i", help="Export file or folder (repeatable)."),
    links: Optional[List[Path]] = typer.Option(
        None, "--links", help="JSONL of duplicate links, {duplicate_id, master_id} or {id_a, id_b} rows (repeatable)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for reports.jsonl, pairs.jsonl, import_summary.json."),
    split: str = typer.Option("time", "--split", help="time: oldest duplicates train, newest test; group: whole groups "
                                                      "by a stable hash."),
    mapping: Optional[List[str]] = typer.Option(
        None, "--map", help="FIELD=SOURCE_PATH, e.g. title=fields.summary; a field other than id, title, description, "
                            "product, component, created adds metadata (repeatable)."),
    metadata: Optional[List[str]] = typer.Option(
        None, "--metadata", help="Keep only these metadata fields (repeatable; default every other scalar field)."),
    fractions: str = typer.Option("0.6,0.2,0.2", "--fractions", help="train,dev,test shares."),
    seed: int = typer.Option(0, "--seed", help="Seed of the group split's hash."),
    epoch_unit: str = typer.Option("auto", "--epoch-unit", help="Unit of epoch-number times: auto, s or ms."),
    date_fields: Optional[List[str]] = typer.Option(
        None, "--date-field", help="A metadata field read as a time and written as ISO 8601 UTC (repeatable; replaces "
                                   "the format's own, e.g. resolved and updated for Jira)."),
    link_fields: Optional[str] = typer.Option(
        None, "--link-fields", help="DUPLICATE,MASTER: the two id fields of the --links rows (default "
                                    "duplicate_id,master_id or id_a,id_b)."),
) -> None:
    """Import a bug tracker's export into reports.jsonl and duplicate pairs.jsonl (train/dev/test), the files
    `lmp data pairs` and the pipeline read, with import_summary.json of what was read, kept and skipped."""
    try:
        cfg = TrackerImportConfig(
            format=fmt, inputs=[str(p) for p in inputs], links=[str(p) for p in links or []], out=str(out),
            split=split, mapping=_mapping_option(mapping or []), metadata=metadata or None,
            fractions=_fractions_option(fractions), seed=seed, epoch_unit=epoch_unit, date_fields=date_fields or None,
            link_fields=_link_fields_option(link_fields))
        summary = import_tracker(cfg)
    except ValidationError as exc:
        fail("; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'import'}: {e['msg']}" for e in exc.errors()))
        return
    except user_errors() as exc:
        fail(str(exc))
        return
    for line in summary.lines():
        typer.echo(line)


def _mapping_option(items: list[str]) -> dict[str, str]:
    """`--map title=fields.summary` -> {"title": "fields.summary"}."""
    mapping = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"--map {item!r}: expected FIELD=SOURCE_PATH, e.g. title=fields.summary")
        mapping[name.strip()] = path.strip()
    return mapping


def _link_fields_option(text: Optional[str]) -> Optional[tuple[str, str]]:
    """`--link-fields dup_of,id` -> ("dup_of", "id")."""
    if text is None:
        return None
    names = tuple(part.strip() for part in text.split(","))
    if len(names) != 2 or not all(names):
        raise typer.BadParameter(f"--link-fields {text!r}: expected two field names, DUPLICATE,MASTER "
                                 "(e.g. duplicate_id,master_id)")
    return names  # type: ignore[return-value]


def _fractions_option(text: str) -> dict[str, float]:
    """`--fractions 0.7,0.15,0.15` -> train, dev, test."""
    try:
        train, dev, test = (float(part) for part in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"--fractions {text!r}: expected three numbers, train,dev,test (e.g. 0.6,0.2,0.2)") from None
    return {"train": train, "dev": dev, "test": test}
