"""`lmp evaluate ...`: run an evaluation config (retrieval, sts, classification tasks)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.config.loader import ConfigError
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.runner import run_evaluation

app = typer.Typer(no_args_is_help=True, help="Evaluate models: retrieval, STS and classification metrics, reports, MLflow.")
EvaluationSetOption = typer.Option(None, "--set", help="Override a field, a list entry by name: --set output_dir=runs/eval/x, "
                                   "--set tasks.retrieval.retrievers.minilm.batch_size=32 (repeatable).")


@app.command("run")
def evaluate_run(
    config: Path = typer.Option(..., "--config", "-c", help="Evaluation config YAML (configs/eval/...)."),
    overrides: Optional[List[str]] = EvaluationSetOption,
    output_dir: Optional[Path] = typer.Option(None, help="Report folder (overrides output_dir)."),
    run_id: Optional[str] = typer.Option(None, help="Log into this MLflow run (the run of the model evaluated)."),
    limit_queries: Optional[int] = typer.Option(
        None, min=1, help="Retrieval: evaluate only the first N queries of each dataset."),
    limit: Optional[int] = typer.Option(None, min=2, help="STS / classification: read only N pairs, or N examples per split."),
) -> None:
    """Run every task of the config; write report.json, report.md and PNGs; log them to MLflow."""
    from lmplatform.cli.common import fail, user_errors
    extra = list(overrides or [])
    if output_dir:
        extra.append(f"output_dir={output_dir}")
    if run_id:
        extra.append(f"tracking.run_id={run_id}")
    try:
        cfg = load_evaluation_config(config, extra)
        for task in cfg.tasks:  # each dataset takes the limits its task's config has a field for
            for dataset in task.datasets:
                for field, value in (("limit_queries", limit_queries), ("limit", limit)):
                    if value and field in type(dataset).model_fields:
                        setattr(dataset, field, value)
        result = run_evaluation(cfg)
    except user_errors() as exc:
        fail(str(exc))
        return
    typer.echo(result.report_md.read_text())
    typer.echo(json.dumps({"output_dir": str(result.output_dir), "mlflow_run_id": result.mlflow_run_id}, indent=2))


@app.command("validate")
def evaluate_validate(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = EvaluationSetOption,
) -> None:
    """Validate an evaluation config and print it fully resolved."""
    import yaml

    from lmplatform.cli.common import fail
    try:
        cfg = load_evaluation_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))
        return
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
