"""What every `lmp` sub-command shares: the run config's --set option and how a user error is reported."""
from __future__ import annotations

import typer
from rich.console import Console

from lmplatform.config.loader import ConfigError
from lmplatform.data.readers import DataError
from lmplatform.models.resolve import ModelNotFoundError

TRACKING_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite at <project>/mlruns/mlflow.db)."

console = Console(stderr=True)
RunConfigSetOption = typer.Option(None, "--set", help="Override a field: --set optim.max_steps=5 (repeatable).")


def fail(message: str, code: int = 2) -> None:
    from rich.markup import escape

    # soft_wrap: an error message is copied and grepped; never break it at the terminal width.
    # escape: a message may hold '[...]' (paths, lists), which rich would read as markup.
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's input, reported in one line instead of a traceback."""
    return (ConfigError, DataError, ModelNotFoundError, FileNotFoundError)
