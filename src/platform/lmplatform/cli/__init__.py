"""The `lmp` command line: one Typer per command group, each module's `app`, joined here.

Every command validates its input before Ray starts.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer

from lmplatform.cli import behavioural, config, data, evaluate, export, graph, models, pipeline, run, serve, tracker_system, tune
from lmplatform.runtime import apply_runtime_defaults

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="lmplatform: adapt, tune, track and serve text encoders on Ray.")


@app.callback()
def _runtime_defaults() -> None:
    """Offline and loopback defaults for this process and every Ray process it starts (user settings win)."""
    apply_runtime_defaults()


app.add_typer(run.app)  # train, demo: at the root
# `lmp pipeline tracker`: import, the tracker recipe and serving in one command (cli/tracker_system.py).
pipeline.app.command("tracker", short_help="A tracker's export to a served duplicate finder: import, the tracker "
                     "recipe, serve.")(tracker_system.tracker)
for name, group in (("config", config), ("data", data), ("evaluate", evaluate), ("pipeline", pipeline),
                    ("behavioural", behavioural), ("graph", graph), ("models", models), ("serve", serve)):
    app.add_typer(group.app, name=name)
# Commands, not groups: a group's usage line would promise `lmp tune [OPTIONS] COMMAND [ARGS]...`.
app.command("tune", short_help="Hyperparameter search with Ray Tune + Optuna.")(tune.tune)
app.command("export", short_help="Export a model for sentence-transformers, TEI/Infinity or ONNX Runtime.")(
    export.export)


def main(argv: Optional[list[str]] = None) -> None:
    app(args=argv if argv is not None else sys.argv[1:], prog_name="lmp")
