"""Run a study: Ray Tune + Optuna TPE over a validated search space, tracked in MLflow.

What a trial runs, how the space is checked and how the winner is registered is its kind's (tune/trial_kinds.py:
train, function, pipeline and evaluation trials, or one registered); this module runs any kind: one MLflow parent
run per study, one child run per trial, the best trial's model registered through the champion gate
(`champion.py`) where its kind registers one.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from lmplatform.ray_runtime import ensure_ray
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten, git_commit
from lmplatform.tune.report import print_summary, save_plots
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG, StudyResult, numeric
from lmplatform.tune.search_state import forget_unsaved_trials
from lmplatform.tune.space import LoadedSpace, define_by_run, load_space, resolve_project_path
from lmplatform.tune.trial_spec import StudyRun

STUDY_FILE = "lmp_study.json"


# -- building the tuner ----------------------------------------------------------
def _search_and_schedule(loaded: LoadedSpace, max_concurrent: int) -> tuple[Any, Any, dict[str, Any]]:
    import optuna
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import ConcurrencyLimiter

    from lmplatform.tune.search import FinalMetricOptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per study it creates
    space = loaded.space
    multi = len(space.targets) > 1
    sampler = optuna.samplers.TPESampler(seed=space.seed)
    searcher = FinalMetricOptunaSearch(
        space=define_by_run(loaded),
        metric=[t.metric for t in space.targets] if multi else space.metric,
        mode=[t.mode for t in space.targets] if multi else space.mode,
        sampler=sampler,
    )
    searcher = ConcurrencyLimiter(searcher, max_concurrent=max_concurrent)
    if space.scheduler.name == "asha" and space.scheduler.metric:
        # ASHA compares an intermediate metric; the study's own comes at the end (Tune takes one or the other).
        scheduler = ASHAScheduler(
            time_attr="training_iteration", grace_period=space.scheduler.grace_period, metric=space.scheduler.metric,
            mode=space.scheduler.mode or space.mode, reduction_factor=space.scheduler.reduction_factor,
            max_t=space.scheduler.max_t,
        )
        tune_metric = {}
    elif space.scheduler.name == "asha":
        scheduler = ASHAScheduler(
            time_attr="training_iteration", grace_period=space.scheduler.grace_period,
            reduction_factor=space.scheduler.reduction_factor, max_t=space.scheduler.max_t,
        )
        tune_metric = {"metric": space.metric, "mode": space.mode}
    else:
        scheduler = FIFOScheduler()
        tune_metric = {} if multi else {"metric": space.metric, "mode": space.mode}
    return searcher, scheduler, tune_metric


def _trainable(loaded: LoadedSpace, study: StudyRun) -> Any:
    from ray import tune

    space = loaded.space
    resources = {"CPU": space.trial_cpus(), **({"GPU": space.resources.gpu} if space.resources.gpu else {})}
    if not any(resources.values()):
        # A trial needs some reservation; a token byte of memory lets a train trial's driver take no CPU,
        # so workers that want every CPU of a node (2 of 2 here) still fit beside it.
        resources = {"CPU": 0, "memory": 1}
    return tune.with_resources(space.kind.module().trainable(loaded, study), resources)


def _reporter(loaded: LoadedSpace) -> dict[str, Any]:
    """Tune's live output: a line when a trial starts (with its parameters), reports or ends (`progress.py`).

    Ray's new output engine (its default) takes its parameter columns from search-space objects
    in `param_space`; our Optuna define-by-run spaces leave that empty, so its table shows no
    parameters at all; its CLIReporter reprints the whole table every few seconds. Unless the user
    chose an engine (RAY_AIR_NEW_OUTPUT), these status lines are printed, and the study's table at the end.
    """
    from lmplatform.tune.progress import TrialStatusLines

    if os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0") != "0":
        return {}
    space = loaded.space
    metrics = [t.metric for t in space.targets] + ([space.scheduler.metric] if space.scheduler.metric else [])
    return {"progress_reporter": TrialStatusLines(metrics, list(space.parameters))}


# -- running a study -------------------------------------------------------------
def _tracking(loaded: LoadedSpace, tracking_uri: Optional[str], experiment: Optional[str]) -> tuple[str, str]:
    """Where the study logs: the arguments, else its base config's tracking section, else the defaults."""
    base_tracking = loaded.space.kind.hook("tracking")
    tracking = base_tracking(loaded) if base_tracking else None
    return (resolve_tracking_uri(tracking_uri or (tracking.tracking_uri if tracking else None)),
            experiment or (tracking.experiment if tracking else "lmplatform-tune"))


def run_study(
    space_path: str | Path,
    overrides: Iterable[str] = (),
    resume: Optional[str] = None,
    tracking_uri: Optional[str] = None,
    experiment: Optional[str] = None,
    storage_path: Optional[str] = None,
    verbose: int = 1,
) -> StudyResult:
    """Validate the space, run (or resume) the study, then summarise, plot and pick the champion."""
    from ray import tune

    loaded = load_space(space_path, list(overrides))  # every check happens before Ray starts
    space = loaded.space
    before_study = space.kind.hook("before_study")
    if before_study is not None:
        before_study(loaded)
    storage = Path(resolve_project_path(storage_path or space.storage_path))
    resumed_run_id = None
    if resume:
        experiment_path = _find_study(storage, space.study, resume)
        state = json.loads((experiment_path / STUDY_FILE).read_text())
        study_name, resumed_run_id = experiment_path.name, state["parent_run_id"]
        tracking_uri, experiment = state["tracking_uri"], state["experiment"]
    else:
        tracking_uri, experiment = _tracking(loaded, tracking_uri, experiment)
        study_name = f"{space.study}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        experiment_path = storage / study_name
    parent, new_study = TrackedRun.start_or_resume(tracking_uri, experiment, study_name, resumed_run_id, lambda: {
        STUDY_TAG: study_name, "lmp.tune_space": str(loaded.path), "lmp.git_commit": git_commit(),
    })
    parent_run_id = parent.run_id
    if new_study:
        parent.log_params(flatten({"space": space.model_dump(mode="json")}) | {"space.set": json.dumps(list(overrides))})
        parent.log_artifact(loaded.path, "space")
        experiment_path.mkdir(parents=True, exist_ok=True)
        (experiment_path / STUDY_FILE).write_text(json.dumps({
            "space": str(Path(space_path).resolve()), "overrides": list(overrides), "parent_run_id": parent_run_id,
            "tracking_uri": tracking_uri, "experiment": experiment,
        }, indent=2))
    ensure_ray()
    if space.kind.early_reports:
        # e.g. a pipeline trial reports its training stage's metrics long before the study's own (a later stage's),
        # which Tune would take for a missing metric; every metric name was checked by `load_space`.
        os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    max_concurrent = _max_concurrent(loaded)
    print(f"[lmp] study {study_name}: {space.num_samples} {space.trial} trial(s), {max_concurrent} at a time, "
          f"{space.scheduler.name} scheduler, target {space.metric} ({space.mode}); MLflow parent run {parent_run_id}",
          flush=True)
    trainable = _trainable(loaded, StudyRun(parent_run_id, study_name, tracking_uri, experiment))
    parent_tracker = TrackedRun(tracking_uri, parent_run_id)
    try:
        if resume:
            forgotten = forget_unsaved_trials(experiment_path)
            if forgotten:
                print(f"[lmp] study {study_name}: trial(s) {', '.join(forgotten)} were suggested but never saved "
                      "before the interruption; their places are suggested again", flush=True)
            # resume_errored keeps an errored trial's id (restart_errored gives it a new one): its runs are named
            # after the id, so the trial continues them from their checkpoints instead of starting over.
            tuner = tune.Tuner.restore(str(experiment_path), trainable=trainable, resume_unfinished=True,
                                       resume_errored=True)
        else:
            searcher, scheduler, tune_metric = _search_and_schedule(loaded, max_concurrent)
            tuner = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(
                    search_alg=searcher, scheduler=scheduler, num_samples=space.num_samples, **tune_metric,
                ),
                run_config=tune.RunConfig(
                    name=study_name, storage_path=str(storage), verbose=verbose, **_reporter(loaded),
                    failure_config=tune.FailureConfig(max_failures=0),
                ),
            )
        grid = tuner.fit()
    except BaseException:
        parent_tracker.finish("KILLED")
        print(f"[lmp] study {study_name} interrupted; continue it with --resume {study_name}", flush=True)
        raise
    result = summarize_study(loaded, grid, study_name, experiment_path, parent_run_id, tracking_uri)
    parent_tracker.finish()
    return result


def _max_concurrent(loaded: LoadedSpace) -> int:
    """The space's number, or for 'auto' as many trials as the cluster's CPUs hold (its kind's `concurrent_trials`)."""
    if loaded.space.max_concurrent != "auto":
        return int(loaded.space.max_concurrent)
    import ray

    return loaded.space.kind.module().concurrent_trials(  # type: ignore[attr-defined]
        loaded, float(ray.cluster_resources().get("CPU", 1.0)))


def _find_study(storage: Path, study: str, resume: str) -> Path:
    if resume == "latest":
        candidates = sorted((p for p in storage.glob(f"{study}-*") if (p / STUDY_FILE).is_file()), key=lambda p: p.name)
        if not candidates:
            raise FileNotFoundError(f"--resume latest: no study {study!r} under {storage}")
        return candidates[-1]
    path = Path(resume) if Path(resume).is_absolute() else storage / resume
    if not (path / STUDY_FILE).is_file():
        known = sorted(p.name for p in storage.glob("*") if (p / STUDY_FILE).is_file())
        raise FileNotFoundError(f"--resume {resume}: no study of that name under {storage}"
                                + (f"; studies there: {', '.join(known[-10:])}" if known else ""))
    return path


# -- after the study ---------------------------------------------------------------
def _trial_rows(loaded: LoadedSpace, grid: Any) -> list[dict[str, Any]]:
    rows = []
    for res in grid:
        trial_id = Path(res.path).name if res.path else "?"
        metrics = res.metrics or {}
        rows.append({
            "trial_id": metrics.get("trial_id", trial_id),
            "status": "ERROR" if res.error else "TERMINATED",
            "params": {k: v for k, v in (res.config or {}).items() if k in loaded.space.parameters},
            "metrics": numeric({k: v for k, v in metrics.items() if not k.startswith("config")}),
            "iterations": metrics.get("training_iteration", 0),
            "mlflow_run_id": metrics.get(RUN_ID_KEY),
            "error": str(res.error).splitlines()[0][:200] if res.error else None,
        })
    return rows


def _best(loaded: LoadedSpace, rows: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The best trial that ran to the end: a trial stopped early by ASHA has no final model (and its
    metric comes from an earlier step), so it cannot be the study's result."""
    metric, mode = loaded.space.metric, loaded.space.mode
    scored = [r for r in rows if r["status"] == "TERMINATED" and metric in r["metrics"] and r["completed"]]
    if not scored:
        return None
    return (min if mode == "min" else max)(scored, key=lambda r: r["metrics"][metric])


def _child_runs(tracking_uri: str, parent_run_id: str) -> dict[str, Any]:
    """Trial id -> its MLflow child run; a trial restarted after a resume prefers its finished run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    parent = client.get_run(parent_run_id)
    runs = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
    by_trial: dict[str, Any] = {}
    for run in sorted(runs, key=lambda r: (r.info.status == "FINISHED", r.info.start_time)):
        by_trial[run.data.tags.get(TRIAL_TAG, "")] = run
    chosen = {run.info.run_id for run in by_trial.values()}
    for run in runs:  # a run cut off by an interrupted study, whose trial was rerun on resume
        if run.info.status == "RUNNING" and run.info.run_id not in chosen:
            client.set_terminated(run.info.run_id, status="KILLED")
    return by_trial


def _close_stopped_run(tracking_uri: str, run: Any) -> None:
    """A trial the scheduler stopped is killed mid-run: its run would stay RUNNING (or read FAILED,
    if the stop surfaced as an error in the trial) though nothing went wrong; say what happened. A pipeline
    trial's stage runs nested under it, cut off with it, are closed too."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    client.set_tag(run.info.run_id, "lmp.stopped_by", "scheduler")
    client.set_terminated(run.info.run_id, status="KILLED")
    nested = client.search_runs([run.info.experiment_id],
                                filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}' and attributes.status = 'RUNNING'")
    for child in nested:
        client.set_terminated(child.info.run_id, status="KILLED")


def summarize_study(
    loaded: LoadedSpace, grid: Any, study_name: str, experiment_path: Path, parent_run_id: str, tracking_uri: str
) -> StudyResult:
    space = loaded.space
    parent = TrackedRun(tracking_uri, parent_run_id)
    rows = _trial_rows(loaded, grid)
    children = _child_runs(tracking_uri, parent_run_id)
    for row in rows:
        child = children.get(row["trial_id"])
        # The trial's own last report carries its run id. A trial the scheduler stopped after its
        # training run had already closed cleanly (a race with the final report) still completed.
        finished_run = child is not None and child.info.status == "FINISHED"
        row["completed"] = bool(row["mlflow_run_id"]) or finished_run
        row["mlflow_run_id"] = row["mlflow_run_id"] or (child.info.run_id if child else None)
        if not row["completed"] and row["status"] == "TERMINATED":
            row["status"] = "STOPPED"
            if child is not None:
                _close_stopped_run(tracking_uri, child)
    best = _best(loaded, rows)
    out = StudyResult(study_name, experiment_path, parent_run_id, tracking_uri,
                      best["trial_id"] if best else None, best["params"] if best else {},
                      best["metrics"] if best else {}, rows)
    parent.log_dict(rows, "trials.json")
    if best:
        parent.log_params({f"best.{k}": v for k, v in best["params"].items()})
        parent.log_metrics({f"best_{k}": v for k, v in best["metrics"].items()})
        parent.set_tags({"lmp.best_trial": best["trial_id"], "lmp.best_run_id": best["mlflow_run_id"] or ""})
    plot_dir = experiment_path / "plots"
    out.plots, out.plot_notes = save_plots(loaded, rows, plot_dir)
    if out.plots:
        parent.log_artifacts(plot_dir, "plots")
    if best and space.kind.registers and space.champion.register_best and best["mlflow_run_id"]:
        out.champion = space.kind.champion(loaded, best, tracking_uri, study_name)
        parent.set_tags({"lmp.champion_moved": out.champion.moved, "lmp.champion_reason": out.champion.reason[:5000],
                         "lmp.registered_model": out.champion.registered_model, "lmp.registered_version": out.champion.version,
                         **(out.champion.verdict.tags() if out.champion.verdict else {})})
    print_summary(out, space)
    return out


def space_from_study(experiment_path: Path) -> LoadedSpace:
    state = json.loads((experiment_path / STUDY_FILE).read_text())
    return load_space(state["space"], state.get("overrides", []))
