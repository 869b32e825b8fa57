"""The end of a study: a summary table in the terminal and Optuna's plots as PNG files."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from lmplatform.tune.results import StudyResult
from lmplatform.tune.space import LoadedSpace, Parameter, SearchSpace


def _distribution(param: Parameter) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if param.distribution == "choice":
        return CategoricalDistribution(param.values)
    if param.distribution in ("int", "randint"):
        return IntDistribution(int(param.low), int(param.high), step=int(param.step or 1))  # type: ignore[arg-type]
    return FloatDistribution(param.low, param.high, log=param.distribution == "loguniform", step=param.step)  # type: ignore[arg-type]


def optuna_study(loaded: LoadedSpace, rows: list[dict[str, Any]]) -> Any:
    """Rebuild an Optuna study from the finished trials (works the same after a resume)."""
    import optuna

    space = loaded.space
    study = optuna.create_study(directions=["minimize" if t.mode == "min" else "maximize" for t in space.targets])
    for row in rows:
        values = [row["metrics"].get(t.metric) for t in space.targets]
        if row["status"] == "ERROR" or any(v is None for v in values):
            continue
        params = {k: v for k, v in row["params"].items() if k in space.parameters}
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: _distribution(space.parameters[k]) for k in params}, values=values,
        ))
    return study


def save_plots(loaded: LoadedSpace, rows: list[dict[str, Any]], folder: Path) -> tuple[list[Path], list[str]]:
    """Optimisation history, parameter importances and parallel coordinates as PNGs; notes say what was skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna_study(loaded, rows)
    folder.mkdir(parents=True, exist_ok=True)
    multi = len(loaded.space.targets) > 1
    target = {"target": (lambda t: t.values[0]), "target_name": loaded.space.metric} if multi else {}
    plots: list[Path] = []
    notes: list[str] = []
    complete = len(study.trials)
    for name, plot, needs in (
        ("optimization_history", ovm.plot_optimization_history, 1),
        ("param_importances", ovm.plot_param_importances, 2),
        ("parallel_coordinate", ovm.plot_parallel_coordinate, 1),
    ):
        if complete < needs:
            notes.append(f"{name}: skipped, needs {needs} finished trial(s), have {complete}")
            continue
        try:
            with warnings.catch_warnings():  # optuna marks its matplotlib plots experimental, on every call
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                ax = plot(study, **target)
            figure = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            figure.set_size_inches(9, 5)
            path = folder / f"{name}.png"
            figure.savefig(path, dpi=100, bbox_inches="tight")
            plt.close(figure)
            plots.append(path)
        except Exception as exc:  # a plot must never fail a finished study
            # e.g. importances when every trial drew the same value: say so, do not fail the study
            notes.append(f"{name}: skipped ({exc})")
    return plots, notes


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_summary(result: StudyResult, space: SearchSpace) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False, width=160)
    table = Table(title=f"study {result.study_name}: {len(result.trials)} trial(s), target {space.metric} ({space.mode})")
    table.add_column("trial")
    table.add_column("status")
    for name in space.parameters:
        table.add_column(name)
    for target in space.targets:
        table.add_column(target.metric, justify="right")
    table.add_column("reports", justify="right")
    reverse = space.mode == "max"
    ordered = sorted(result.trials, key=lambda r: (space.metric not in r["metrics"],
                                                   (-1 if reverse else 1) * r["metrics"].get(space.metric, 0.0)))
    for row in ordered:
        mark = " *" if row["trial_id"] == result.best_trial_id else ""
        table.add_row(
            row["trial_id"] + mark, row["status"],
            *(_fmt(row["params"].get(name, "-")) for name in space.parameters),
            *(_fmt(row["metrics"].get(t.metric, "-")) for t in space.targets),
            _fmt(row["iterations"]),
        )
    console.print(table)
    if result.best_trial_id:
        console.print(f"best trial {result.best_trial_id}: {result.best_params} -> {space.metric} "
                      f"{_fmt(result.best_metrics.get(space.metric))}", soft_wrap=True)
    for note in result.plot_notes:
        console.print(f"plot {note}")
    if result.plots:
        folder = result.plots[0].parent
        console.print(f"plots: {', '.join(p.name for p in result.plots)} in {folder} (and in MLflow run "
                      f"{result.parent_run_id} under plots/)", soft_wrap=True)
    if result.champion:
        c = result.champion
        console.print(f"registered {c.registered_model} version {c.version}; {c.reason}", soft_wrap=True)
