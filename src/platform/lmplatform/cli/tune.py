"""`lmp tune`: run or resume a hyperparameter study described by a tune_spaces/*.yaml file."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.ray_runtime import ensure_ray
from lmplatform.tune.space import load_space


def tune(
    space: Path = typer.Option(..., "--space", "-s", help="Search space YAML (tune_spaces/*.yaml)."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Override a space field (num_samples=4) or a base run-config field (optim.max_steps=5)."
    ),
    resume: Optional[str] = typer.Option(None, help="Continue an interrupted study: its name, or 'latest'."),
    check: bool = typer.Option(False, "--check", help="Validate the space and exit (no Ray)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray)."),
) -> None:
    """Hyperparameter search with Ray Tune + Optuna: validate the space, run every trial on Ray, log each to MLflow
    and register the champion."""
    from lmplatform.cli.common import fail, user_errors

    try:
        loaded = load_space(space, overrides or [])
        if check:
            typer.echo(f"{space}: ok ({len(loaded.space.parameters)} parameter(s), {loaded.space.num_samples} "
                       f"{loaded.space.trial} trial(s), target {loaded.space.metric} {loaded.space.mode})")
            return
        from lmplatform.tune.tuner import run_study

        if address:
            ensure_ray(address)
        result = run_study(space, overrides or [], resume=resume)
    except user_errors() as exc:
        fail(str(exc))
        return
    if result.best_trial_id is None:
        fail(f"study {result.study_name} finished without a trial reporting {loaded.space.metric}", code=1)
