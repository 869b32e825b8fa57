"""`lmp graph ...`: inspect ADE-format relation data and run the KNN relation-extraction evaluation."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.cli.common import TRACKING_URI_HELP, fail, user_errors
from lmplatform.config.loader import apply_overrides, parse_config, read_yaml
from lmplatform.graph.data import read_ade, read_folds, split_fold
from lmplatform.ray_runtime import ensure_ray
from lmplatform.runtime import resolve_tracking_uri

app = typer.Typer(no_args_is_help=True, help="Graph contrastive learning: relation data and KNN NER / RE evaluation.")


@app.command("inspect")
def inspect_data(
    paths: List[str] = typer.Argument(..., help="ADE-format JSONL files (or SpERT JSON arrays)."),
    folds: Optional[Path] = typer.Option(None, help="folds.json to check against the data."),
    fail_on_bad_row: bool = typer.Option(False, "--fail-on-bad-row", help="Stop at the first bad sentence."),
) -> None:
    """Validate sentences (spans, relations, tokens) and print counts, bad rows and fold sizes."""
    try:
        sentences, report = read_ade(paths, "fail" if fail_on_bad_row else "skip")
        out = {"summary": report.summary(), **{k: v for k, v in report.__dict__.items() if k != "files"}}
        if folds is not None:
            split = read_folds(folds)
            out["folds"] = {name: dict(zip(("train", "test"), map(len, split_fold(sentences, split, name)))) for name in split}
    except user_errors() as exc:
        fail(str(exc))
        return
    typer.echo(json.dumps(out, indent=2))


@app.command("evaluate")
def evaluate(
    config: Path = typer.Option(..., "--config", "-c", help="Relation evaluation YAML (see configs/eval/relations_ade.yaml)."),
    overrides: Optional[List[str]] = typer.Option(None, "--set", help="Override a field: --set folds=[0,1] (repeatable)."),
    output: Path = typer.Option(Path("runs/relation_eval"), help="Folder for relation_eval.json and the t-SNE PNGs."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
    experiment: str = typer.Option("lmplatform-graph", help="MLflow experiment."),
    run_name: Optional[str] = typer.Option(None, help="MLflow run name."),
    local: bool = typer.Option(False, "--local", help="Run folds one after another in this process instead of as Ray tasks."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: $RAY_ADDRESS, else an embedded local Ray)."),
) -> None:
    """KNN NER / RE / RE- macro-F1 (k chosen per fold), linear probes and CLGS accuracy; one Ray task per fold."""
    from lmplatform.evaluation.relations import RelationEvalConfig, run_cross_validation

    try:
        cfg = parse_config(apply_overrides(read_yaml(config), overrides or []), RelationEvalConfig, source=str(config))
        for path in (cfg.data_path, cfg.folds_file):
            if not Path(path).is_file():
                raise FileNotFoundError(f"{path} not found (from {config})")
        if address and not local:
            ensure_ray(address)
        summary = run_cross_validation(cfg, output, resolve_tracking_uri(tracking_uri), experiment, run_name, parallel=not local)
    except user_errors() as exc:
        fail(str(exc))
        return
    summary.pop("per_fold", None)
    typer.echo(json.dumps(summary, indent=2))
