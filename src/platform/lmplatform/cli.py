"""The `lmp` command line. Every command validates its input before Ray starts."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.cli_common import SetOption, fail, user_errors
from lmplatform.cli_pipeline import pipeline_app
from lmplatform.config.loader import ConfigError, load_run_config

app = typer.Typer(add_completion=False, no_args_is_help=True, help="lmplatform: adapt, tune, track and serve text encoders on Ray.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect and validate run configs.")
data_app = typer.Typer(no_args_is_help=True, help="Inspect corpora before training.")
app.add_typer(config_app, name="config")
app.add_typer(data_app, name="data")
from lmplatform.cli_evaluate import evaluate_app  # noqa: E402
app.add_typer(evaluate_app, name="evaluate")

app.add_typer(pipeline_app, name="pipeline")

@app.command()
def train(
    config: Path = typer.Option(..., "--config", "-c", help="Run config YAML."),
    overrides: Optional[List[str]] = SetOption,
    resume: Optional[str] = typer.Option(None, help="Continue the named run from its latest checkpoint."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: $RAY_ADDRESS, else an embedded local Ray)."),
) -> None:
    """Train with one objective as a Ray Train job, tracked in MLflow."""
    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.train.run import run_training

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


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON schema of the run config."""
    from lmplatform.config.schema import RunConfig

    typer.echo(json.dumps(RunConfig.model_json_schema(), indent=2))


@config_app.command("validate")
def config_validate(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = SetOption,
) -> None:
    """Validate a config (with overrides) and print it fully resolved."""
    import yaml

    try:
        cfg = load_run_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))
        return
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


@data_app.command("report")
def data_report(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = SetOption,
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


@app.command()
def demo(
    data: Optional[Path] = typer.Option(None, help="Corpus for the MLM stage (default: the shipped trouble reports)."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Override a field of configs/pipelines/demo.yaml: --set stages.pairs_ewc.ewc.lambda=1e7."),
    tune: bool = typer.Option(True, "--tune/--no-tune", help="Run the small Tune study and champion registration."),
    serve: bool = typer.Option(True, "--serve/--no-serve", help="End by serving the model and querying it over HTTP."),
    resume: Optional[str] = typer.Option(None, help="Continue this demo pipeline run: finished stages are skipped."),
) -> None:
    """The whole product on the shipped trouble reports: MLM -> DeCLUTR -> pairs with/without EWC -> evaluation ->
    Tune -> champion -> Serve, with one summary table at the end."""
    from lmplatform.demo import run_demo

    try:
        run_demo(data, overrides or [], serve=serve, tune=tune, resume=resume)
    except user_errors() as exc:
        fail(str(exc))


from lmplatform.cli_behavioural import behavioural_app  # noqa: E402

app.add_typer(behavioural_app, name="behavioural")

from lmplatform.cli_data_spans import register as _register_span_report  # noqa: E402

_register_span_report(data_app)

from lmplatform.cli_graph import graph_app  # noqa: E402

app.add_typer(graph_app, name="graph")

from lmplatform.cli_tune import tune_app  # noqa: E402
from lmplatform.cli_models import models_app  # noqa: E402

app.add_typer(tune_app, name="tune")
app.add_typer(models_app, name="models")
from lmplatform.cli_serve import serve_app  # noqa: E402
app.add_typer(serve_app, name="serve")


def main(argv: Optional[list[str]] = None) -> None:
    app(args=argv if argv is not None else sys.argv[1:], prog_name="lmp")


if __name__ == "__main__":
    main()
