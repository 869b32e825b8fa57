"""`lmp config`: the run config's schema, and a config validated and fully resolved."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.cli.common import RunConfigSetOption, fail
from lmplatform.config.loader import ConfigError
from lmplatform.objectives.run_config import RunConfig, load_run_config

app = typer.Typer(no_args_is_help=True, help="Inspect and validate run configs.")


@app.command("schema")
def config_schema() -> None:
    """Print the JSON schema of the run config."""
    typer.echo(json.dumps(RunConfig.model_json_schema(), indent=2))


@app.command("validate")
def config_validate(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = RunConfigSetOption,
) -> None:
    """Validate a config (with overrides) and print it fully resolved."""
    import yaml

    try:
        cfg = load_run_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))
        return
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
