"""`lmp train` and `lmp demo`: a training run, and the whole product on the shipped data."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.cli.common import RunConfigSetOption, fail, user_errors
from lmplatform.objectives.run_config import load_run_config
from lmplatform.ray_runtime import ensure_ray

app = typer.Typer()


@app.command()
def train(
    config: Path = typer.Option(..., "--config", "-c", help="Run config YAML."),
    overrides: Optional[List[str]] = RunConfigSetOption,
    resume: Optional[str] = typer.Option(None, help="Continue the named run from its latest checkpoint."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: $RAY_ADDRESS, else an embedded local Ray)."),
) -> None:
    """Train with one objective as a Ray Train job, tracked in MLflow."""
    from lmplatform.jobs.train_run import run_training

    try:
        cfg = load_run_config(config, overrides or [])
        if address:
            ensure_ray(address)
        result = run_training(cfg, resume=resume)
    except user_errors() as exc:
        fail(str(exc))
        return
    typer.echo(json.dumps({
        "run_name": result.run_name,
        "mlflow_run_id": result.mlflow_run_id,
        "model_dir": str(result.model_dir),
        "registered_model": result.registered_model,
        "model_version": result.model_version,
        "metrics": result.metrics,
    }, indent=2))


@app.command()
def demo(
    data: Optional[Path] = typer.Option(None, help="Corpus for the MLM stage (default: the shipped trouble reports)."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Override a field of configs/pipelines/demo.yaml: --set stages.pairs_ewc.ewc.lambda=1e7."),
    tune: bool = typer.Option(True, "--tune/--no-tune", help="Run the small Tune study and champion registration."),
    serve: bool = typer.Option(True, "--serve/--no-serve", help="End by serving the model and querying it over HTTP."),
    resume: Optional[str] = typer.Option(None, help="Continue this demo pipeline run: finished stages are skipped."),
    results_file: Optional[Path] = typer.Option(
        None, help="Also write the summary (seconds per step, retrieval, study, gate) and the machine as JSON here."),
) -> None:
    """The whole product on the shipped trouble reports: MLM -> DeCLUTR -> pairs with/without EWC -> evaluation ->
    Tune -> champion -> Serve, with one summary table at the end."""
    from lmplatform.demo import run_demo

    try:
        run_demo(data, overrides or [], serve=serve, tune=tune, resume=resume, results_file=results_file)
    except user_errors() as exc:
        fail(str(exc))
