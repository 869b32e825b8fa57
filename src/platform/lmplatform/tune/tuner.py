"""Run a study: Ray Tune + Optuna TPE over a validated search space, tracked in MLflow.

Train trials: in Ray 2.60 (Train V2) a Tuner cannot wrap a TorchTrainer, so each
trial is a small driver function that calls `run_training` (which fits a
TorchTrainer) with `TuneReportCallback`; the workers' reports reach Tune and ASHA.
The driver reserves a sliver of CPU so it does not starve its own workers.
Function trials: a plain function trainable that reports with `tune.report`.
Pipeline trials: each trial runs a whole pipeline with its values (`pipeline_trial.py`).
Evaluation trials: each trial runs a registered evaluation with its values (`evaluation_trial.py`).

One MLflow parent run per study, one child run per trial; the best train trial's
model is registered and may become champion (see `champion.py`).
"""
from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from lmplatform.evaluation.system import text_metadata
from lmplatform.objectives.run_config import load_run_config
from lmplatform.pipeline.config import build_stage_config, resolve_references
from lmplatform.pipeline.runner import stage_outputs
from lmplatform.pipeline.state import PipelineState
from lmplatform.pipeline.system import publish_system
from lmplatform.pipeline.system_config import SystemConfig
from lmplatform.ray_runtime import ensure_ray
from lmplatform.retrieval.settings import SearchSettings
from lmplatform.runtime import resolve_storage_path, resolve_tracking_uri
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten, git_commit
from lmplatform.tracking.version_tags import OBJECTIVE_TAG
from lmplatform.tune.champion import ChampionDecision, GateInputs, evaluation_fingerprint, register_and_maybe_promote
from lmplatform.tune.evaluation_trial import evaluation_trial
from lmplatform.tune.gate import check_held_out, check_system_held_out
from lmplatform.tune.report import print_summary, save_plots
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG, StudyResult
from lmplatform.tune.search_state import forget_unsaved_trials
from lmplatform.tune.space import (
    ChampionSpec,
    LoadedSpace,
    define_by_run,
    gate_metric,
    import_callable,
    load_space,
    param_overrides,
    resolve_project_path,
)

STUDY_FILE = "lmp_study.json"


# -- trainables ----------------------------------------------------------------
def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def train_trial(config: dict[str, Any], *, base_config: str, overrides: list[str], parent_run_id: str, study: str) -> None:
    """One train trial: a distributed training run whose worker reports reach Tune through TuneReportCallback."""
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from lmplatform.jobs.train_run import run_training

    trial_id = tune.get_context().get_trial_id()
    cfg = load_run_config(base_config, [*overrides, *param_overrides(config), "tracking.register_model=false"])
    run_name, resume = trial_run(cfg.checkpoint.storage_path, study, trial_id)
    if resume:
        print(f"[lmp] trial {trial_id}: continuing its training run {run_name} from its last checkpoint", flush=True)
    result = run_training(
        cfg, resume=resume, run_name=run_name, parent_run_id=parent_run_id,
        extra_tags={STUDY_TAG: study, TRIAL_TAG: trial_id}, callbacks=[TuneReportCallback()],
    )

    child = TrackedRun(result.tracking_uri, result.mlflow_run_id)
    child.set_tags({"lmp.checkpoint_path": result.checkpoint_path or "", "lmp.model_artifact_uri": result.model_artifact_uri})
    # The data report (documents kept, bad rows, e.g. what a DeCLUTR span length drops) joins the
    # last result, with the MLflow run id so the study can find the trial's model.
    data_metrics = {k: v for k, v in child.client.get_run(child.run_id).data.metrics.items() if k.startswith("data/")}
    tune.report({**result.metrics, **data_metrics, RUN_ID_KEY: result.mlflow_run_id})


def trial_run(storage_path: str, study: str, trial_id: str) -> tuple[str, Optional[str]]:
    """(Ray Train run name, the same name when that run exists and must be continued, else None).

    The name is fixed per trial, so a trial that a restored study (`--resume`) runs again picks
    up its training run at the last checkpoint instead of starting over.
    """
    name = f"{study}.{trial_id}"
    storage = resolve_storage_path(storage_path)
    exists = "://" not in storage and (Path(storage) / name).is_dir()
    return name, name if exists else None


def _as_iterator(out: Any) -> Iterator[dict[str, Any]]:
    if isinstance(out, dict):
        yield out
    elif isinstance(out, Iterable):
        yield from out
    else:
        raise TypeError(f"a function trial must return a dict of metrics or yield dicts, got {type(out).__name__}")


def function_trial(
    config: dict[str, Any], *, function: str, function_args: dict[str, Any], parent_run_id: str,
    tracking_uri: str, experiment: str, study: str,
) -> None:
    """One cheap trial: call `function(**function_args, **params)`; each dict it returns or yields is one report."""
    from ray import tune

    # Tune runs each trial in its own folder; relative paths in function_args (data files, the
    # default embedding cache) must mean what they mean for the job, so go back to its directory.
    if os.environ.get("TUNE_ORIG_WORKING_DIR"):
        os.chdir(os.environ["TUNE_ORIG_WORKING_DIR"])
    trial_id = tune.get_context().get_trial_id()
    tracker = TrackedRun.start(
        tracking_uri, experiment, f"{study}-{trial_id}", {STUDY_TAG: study, TRIAL_TAG: trial_id}, parent_run_id
    )
    tracker.log_params({**function_args, **config})
    fn = import_callable(function)
    try:
        for step, metrics in enumerate(_as_iterator(fn(**function_args, **config)), start=1):
            tracker.log_metrics(_numeric(metrics), step=step)
            tune.report({**metrics, RUN_ID_KEY: tracker.run_id})
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish()


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


def _trainable(loaded: LoadedSpace, parent_run_id: str, study: str, tracking_uri: str, experiment: str) -> Any:
    from ray import tune

    space = loaded.space
    resources = {"CPU": space.trial_cpus(), **({"GPU": space.resources.gpu} if space.resources.gpu else {})}
    if not any(resources.values()):
        # A trial needs some reservation; a token byte of memory lets a train trial's driver take no CPU,
        # so workers that want every CPU of a node (2 of 2 here) still fit beside it.
        resources = {"CPU": 0, "memory": 1}
    if space.trial == "train":
        fn: Callable[..., Any] = tune.with_parameters(
            train_trial, base_config=str(loaded.base_config_path), overrides=trial_base_overrides(loaded),
            parent_run_id=parent_run_id, study=study,
        )
    elif space.trial == "pipeline":
        from lmplatform.tune.pipeline_trial import pipeline_trial

        fn = tune.with_parameters(
            pipeline_trial, base_pipeline=str(loaded.base_pipeline_path), overrides=loaded.base_overrides,
            parent_run_id=parent_run_id, tracking_uri=tracking_uri, experiment=experiment, study=study,
        )
    elif space.trial == "evaluation":
        fn = tune.with_parameters(
            evaluation_trial, base_evaluation=str(loaded.base_evaluation_path), overrides=loaded.base_overrides,
            parent_run_id=parent_run_id, tracking_uri=tracking_uri, experiment=experiment, study=study,
        )
    else:
        fn = tune.with_parameters(
            function_trial, function=space.function, function_args=space.function_args, parent_run_id=parent_run_id,
            tracking_uri=tracking_uri, experiment=experiment, study=study,
        )
    return tune.with_resources(fn, resources)


def trial_base_overrides(loaded: LoadedSpace) -> list[str]:
    """The space's overrides plus absolute paths: trial processes run in their own working directories."""
    cfg = loaded.base
    assert cfg is not None
    absolute = [
        f"data.train_paths={json.dumps([str(resolve_project_path(p)) for p in cfg.data.train_paths])}",
        f"data.validation_paths={json.dumps([str(resolve_project_path(p)) for p in cfg.data.validation_paths])}",
        f"checkpoint.storage_path={resolve_storage_path(cfg.checkpoint.storage_path)}",
        f"tracking.tracking_uri={resolve_tracking_uri(cfg.tracking.tracking_uri)}",
    ]
    local_model = resolve_project_path(cfg.model.name_or_path)
    if "://" not in cfg.model.name_or_path and local_model.exists():
        absolute.append(f"model.name_or_path={local_model}")
    rv = cfg.retrieval_validation
    if rv is not None and rv.pairs is not None:
        for key in ("train_paths", "validation_paths"):
            paths = [str(resolve_project_path(p)) for p in getattr(rv.pairs, key)]
            absolute.append(f"retrieval_validation.pairs.{key}={json.dumps(paths)}")
    if rv is not None and rv.distractors is not None:
        paths = [str(resolve_project_path(p)) for p in rv.distractors.paths]
        absolute.append(f"retrieval_validation.distractors.paths={json.dumps(paths)}")
    if (rv is not None and "://" not in rv.first_stage and rv.first_stage != "bm25"
            and resolve_project_path(rv.first_stage).exists()):
        absolute.append(f"retrieval_validation.first_stage={resolve_project_path(rv.first_stage)}")
    return [*loaded.base_overrides, *absolute]


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
    if loaded.base is not None:
        return (resolve_tracking_uri(tracking_uri or loaded.base.tracking.tracking_uri),
                experiment or loaded.base.tracking.experiment)
    if loaded.base_pipeline is not None:
        tracking = loaded.base_pipeline.tracking
        return resolve_tracking_uri(tracking_uri or tracking.tracking_uri), experiment or tracking.experiment
    if loaded.base_evaluation is not None:
        tracking = loaded.base_evaluation.tracking
        return resolve_tracking_uri(tracking_uri or tracking.tracking_uri), experiment or tracking.experiment
    return resolve_tracking_uri(tracking_uri), experiment or "lmplatform-tune"


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
    if loaded.base is not None and space.champion.register_best:
        check_held_out(space.champion, loaded.base)
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
    if space.trial == "pipeline":
        # A pipeline trial reports its training stage's metrics long before the study's own (a later stage's), which
        # Tune would take for a missing metric; every metric name was checked against the stages by `load_space`.
        os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    max_concurrent = _max_concurrent(loaded)
    print(f"[lmp] study {study_name}: {space.num_samples} {space.trial} trial(s), {max_concurrent} at a time, "
          f"{space.scheduler.name} scheduler, target {space.metric} ({space.mode}); MLflow parent run {parent_run_id}",
          flush=True)
    trainable = _trainable(loaded, parent_run_id, study_name, tracking_uri, experiment)
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
    """The space's number, or for 'auto' as many pipeline trials as the cluster's CPUs hold (pipeline_trial.py)."""
    if loaded.space.max_concurrent != "auto":
        return int(loaded.space.max_concurrent)
    import ray

    from lmplatform.tune.pipeline_trial import concurrent_trials

    return concurrent_trials(loaded.base_pipeline, float(ray.cluster_resources().get("CPU", 1.0)))


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
            "metrics": _numeric({k: v for k, v in metrics.items() if not k.startswith("config")}),
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
    if best and space.trial in ("train", "pipeline") and space.champion.register_best and best["mlflow_run_id"]:
        champion = _champion if space.trial == "train" else _pipeline_champion
        out.champion = champion(loaded, best, tracking_uri, study_name)
        parent.set_tags({"lmp.champion_moved": out.champion.moved, "lmp.champion_reason": out.champion.reason[:5000],
                         "lmp.registered_model": out.champion.registered_model, "lmp.registered_version": out.champion.version,
                         **(out.champion.verdict.tags() if out.champion.verdict else {})})
    print_summary(out, space)
    return out


def _winner_tags(study_name: str, best: dict[str, Any], objective: str) -> dict[str, str]:
    """The tags a study's winning version is registered with: its study, trial, objective and parameters."""
    return {STUDY_TAG: study_name, TRIAL_TAG: best["trial_id"], OBJECTIVE_TAG: objective,
            **{f"param.{k}": str(v) for k, v in best["params"].items()}}


def _champion(loaded: LoadedSpace, best: dict[str, Any], tracking_uri: str, study_name: str) -> ChampionDecision:
    from mlflow.tracking import MlflowClient

    space = loaded.space
    run = MlflowClient(tracking_uri).get_run(best["mlflow_run_id"])
    cfg = loaded.trial_config(best["params"])
    fingerprint = evaluation_fingerprint(cfg, run.data.tags.get("lmp.data_fingerprint", ""), space.metric,
                                         run.data.tags.get("lmp.retrieval_validation_fingerprint", ""))
    name = space.champion.registered_model or cfg.registered_model_name()
    val_metrics = {k: v for k, v in best["metrics"].items() if k.startswith("val_")}
    gate = None
    if space.champion.confirm is not None:
        gate = GateInputs(space.champion, gate_metric(space), cfg.objective.name, cfg.model.name_or_path)
    return register_and_maybe_promote(
        tracking_uri, name, best["mlflow_run_id"], "model", space.metric, space.mode,
        best["metrics"][space.metric], fingerprint, val_metrics,
        tags=_winner_tags(study_name, best, cfg.objective.name),
        alias=space.champion.alias, gate=gate,
    )


def _pipeline_champion(loaded: LoadedSpace, best: dict[str, Any], tracking_uri: str, study_name: str) -> ChampionDecision:
    """Register the best pipeline trial's model (`champion.stage`, by default its last training or system stage) and
    let the gate decide on the alias. A system stage's bi-encoder is registered with what makes it servable as it was
    measured (index, search settings, its re-ranker's version) before the gate, which then compares systems. A
    confirmation set may name the trial's own files (`stage:pairs/dev_confirm`), and must share no query with what
    any of its stages trained or selected on."""
    from lmplatform.tune.pipeline_trial import trial_state_folder

    space, pipeline = loaded.space, loaded.trial_pipeline(best["params"])
    folder = trial_state_folder(loaded, study_name, best["trial_id"])
    state = PipelineState.load(folder)
    registrable = [stage for stage in pipeline.stages if stage.spec.registers]
    stage = next(s for s in registrable if s.name == (space.champion.stage or registrable[-1].name))
    record, outputs = state.stages[stage.name], stage_outputs(state)
    spec = ChampionSpec.model_validate(resolve_references(space.champion.model_dump(mode="json"), outputs))
    trained = [s for s in pipeline.stages if s.spec.trains]
    system = SystemConfig.model_validate(resolve_references(stage.system.model_dump(mode="json"), outputs)) \
        if stage.system is not None else None
    source = next(s for s in trained if s.name == stage.system.retriever.removeprefix("stage:")) if stage.system else stage
    name = spec.registered_model or (system.register_as.name if system and system.register_as
                                     else f"{pipeline.name}-{stage.name}")
    base_model = state.stages[source.name].init_model or "default"
    # a system is registered, gated and tagged as its retriever, the training stage `source`
    objective = build_stage_config(pipeline, source, "default", "runs", "gate", None, outputs).objective.name
    gate = None
    if spec.confirm is not None:
        for other in trained:
            check_held_out(spec, build_stage_config(pipeline, other, "default", "runs", "gate", None, outputs))
        if system is not None:
            check_system_held_out(spec, system.select)
        search = SearchSettings.model_validate(record.search) if system is not None else None
        metadata = system.metadata if system is not None else None
        gate = GateInputs(spec, gate_metric(space), objective, base_model, search,
                          text_metadata(metadata.corpus, metadata.fields, metadata.fusion.read_fields()) if metadata else None)

    def make_servable(version: str) -> None:
        if system is not None and system.index is not None:
            publish_system(system, tracking_uri, name, version, record.model_dir or "",
                           SearchSettings.model_validate(record.search), record.reranker_run_id, folder / stage.name)

    value = best["metrics"][space.metric]
    return register_and_maybe_promote(
        tracking_uri, name, record.model_run_id or record.mlflow_run_id, "model", space.metric, space.mode, value,
        f"pipeline:{pipeline.name}:{space.metric}",
        {k: v for k, v in best["metrics"].items() if k.startswith(f"{stage.name}/") and "ir_" in k},
        tags={**_winner_tags(study_name, best, objective), "lmp.pipeline_run": state.run_name},
        alias=spec.alias, gate=gate, before_decision=make_servable,
    )


def space_from_study(experiment_path: Path) -> LoadedSpace:
    state = json.loads((experiment_path / STUDY_FILE).read_text())
    return load_space(state["space"], state.get("overrides", []))
