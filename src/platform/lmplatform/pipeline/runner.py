"""Run a pipeline: each stage is a `run_training` nested under one MLflow parent run.

A stage's exported model folder is the next stage's starting model (`init_from:
stage:<name>`) and the θ* of a later EWC stage (`ewc.anchor`). The state file
records finished stages; `resume=<pipeline run>` skips them and continues the
unfinished stage, from its Ray Train checkpoint when it had one.
"""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lmplatform.markdown import markdown_table
from lmplatform.pipeline.config import STAGE_PREFIX, PipelineConfig, StageConfig, StageEvaluationConfig, build_stage_config
from lmplatform.pipeline.preflight import preflight_pipeline
from lmplatform.pipeline.state import FAILED, FINISHED, RUNNING, PipelineState, StageState

PIPELINE_TAG = "lmp.pipeline_run"
STAGE_TAG = "lmp.pipeline_stage"


@dataclass
class PipelineResult:
    run_name: str
    parent_run_id: str
    tracking_uri: str
    folder: Path
    state: PipelineState
    forgetting: list[dict[str, object]]
    continual: dict[str, float]


def new_pipeline_run_name(cfg: PipelineConfig) -> str:
    return f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def run_pipeline(cfg: PipelineConfig, resume: Optional[str] = None) -> PipelineResult:
    """Run (or continue) every stage; raises `PreflightError` before anything starts when a stage's
    data file or model is missing."""
    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten, resolve_tracking_uri
    from lmplatform.train.run import resolve_storage_path

    root = Path(resolve_storage_path(cfg.storage_path))
    if resume:
        folder = root / resume
        if not PipelineState.path(folder).is_file():
            known = sorted(p.name for p in root.iterdir() if PipelineState.path(p).is_file()) if root.is_dir() else []
            raise FileNotFoundError(f"--resume {resume}: no pipeline state under {folder}"
                                    + (f"; pipeline runs there: {', '.join(known[-10:])}" if known else ""))
        state = PipelineState.load(folder)
        if state.pipeline != cfg.name:
            raise ValueError(f"--resume {resume}: that run is of pipeline {state.pipeline!r}, this config is {cfg.name!r}")
        unknown = [name for name, s in state.stages.items() if s.status == FINISHED and name not in {x.name for x in cfg.stages}]
        if unknown:
            raise ValueError(f"--resume {resume}: finished stage(s) {', '.join(unknown)} are not in this config")
        preflight_pipeline(cfg, {n: r.model_dir or r.output_path for n, r in state.stages.items()
                                 if r.status == FINISHED and (r.model_dir or r.output_path)})
        parent, _ = TrackedRun.start_or_resume(state.tracking_uri, cfg.tracking.experiment, state.run_name, state.parent_run_id)
        print(f"[lmp] pipeline {resume}: resuming; finished stages: "
              f"{', '.join(n for n, s in state.stages.items() if s.status == FINISHED) or 'none'}", flush=True)
    else:
        # Before the parent run and the state file: a pipeline that cannot finish leaves nothing behind.
        preflight_pipeline(cfg)
        run_name = new_pipeline_run_name(cfg)
        folder = root / run_name
        tracking_uri = resolve_tracking_uri(cfg.tracking.tracking_uri)
        parent, _ = TrackedRun.start_or_resume(tracking_uri, cfg.tracking.experiment, run_name, None,
                                               lambda: {PIPELINE_TAG: run_name, "lmp.pipeline": cfg.name})
        dumped = cfg.model_dump(mode="json", by_alias=True)
        parent.log_params(flatten({k: v for k, v in dumped.items() if k != "stages"})
                          | {f"stage.{i}": s["name"] for i, s in enumerate(dumped["stages"])})
        parent.log_dict(dumped, "pipeline.json")
        state = PipelineState(cfg.name, run_name, parent.run_id, tracking_uri)
        state.save(folder)
        print(f"[lmp] pipeline {run_name}: {len(cfg.stages)} stage(s); MLflow parent run {parent.run_id}; "
              f"state in {PipelineState.path(folder)}", flush=True)

    ensure_ray()
    try:
        if cfg.tasks and not state.baseline_task_scores:
            start = _resolve_model(cfg.stages[0].init_from, state)
            state.baseline_task_scores = _task_scores(cfg, start, start, state)
            state.save(folder)
        for index, stage in enumerate(cfg.stages):
            record = state.stage(stage.name)
            if record.status == FINISHED:
                print(f"[lmp] stage {index + 1}/{len(cfg.stages)} {stage.name}: finished earlier, skipped", flush=True)
                continue
            if stage.mine is not None:
                _run_mine_stage(cfg, stage, index, state, folder, parent)
            else:
                _run_stage(cfg, stage, index, state, folder, parent)
    except BaseException:
        parent.finish("FAILED")
        print(f"[lmp] pipeline {state.run_name} failed; continue it with --resume {state.run_name}", flush=True)
        raise
    forgetting = forgetting_table(cfg, state)
    continual = _log_summary(cfg, state, parent, forgetting)
    parent.finish()
    return PipelineResult(state.run_name, state.parent_run_id, state.tracking_uri, folder, state, forgetting, continual)


def _resolve_model(reference: str, state: PipelineState) -> str:
    if reference.startswith(STAGE_PREFIX):
        name = reference[len(STAGE_PREFIX):]
        record = state.stages.get(name)
        if record is None or record.status != FINISHED or not record.model_dir:
            raise RuntimeError(f"{reference}: that stage has not finished")
        return record.model_dir
    return reference


def _run_stage(cfg: PipelineConfig, stage: StageConfig, index: int, state: PipelineState, folder: Path, parent) -> None:  # noqa: ANN001
    from lmplatform.train.run import new_run_name, run_training

    record = state.stage(stage.name)
    init = _resolve_model(stage.init_from, state)
    anchor = _resolve_model(stage.ewc.anchor_reference, state) if stage.ewc else None
    outputs = {name: done.output_path for name, done in state.stages.items() if done.output_path}  # mine stages' files
    models = {name: done.model_dir for name, done in state.stages.items() if done.status == FINISHED and done.model_dir}
    run_cfg = build_stage_config(cfg, stage, init, str(folder), f"{state.run_name}.{stage.name}", anchor, outputs, models)
    record.init_model, record.status, record.error = init, RUNNING, None
    record.ewc_lambda = stage.ewc.lambda_ if stage.ewc else None
    record.attempts += 1
    state.save(folder)
    label = f"stage {index + 1}/{len(cfg.stages)} {stage.name}"
    print(f"[lmp] {label}: {run_cfg.objective.name} from {init}"
          + (f", EWC λ={stage.ewc.lambda_:g} against {stage.ewc.anchor_reference}" if stage.ewc else ""), flush=True)
    stage_start = time.perf_counter()
    try:
        for evaluation in stage.evaluations:
            if evaluation.key not in record.before:
                record.before[evaluation.key] = _evaluate(evaluation, init, init, state).metrics
                state.save(folder)
        resume = _resumable_train_run(record, state, folder, stage.name, run_cfg.tracking.experiment)
        if resume:
            print(f"[lmp] {label}: continuing its Ray Train run {resume}", flush=True)
        # Recorded before training starts, so a stage killed at any point can be continued.
        record.train_run = resume or new_run_name(run_cfg)
        state.save(folder)
        train_start = time.perf_counter()
        result = run_training(run_cfg, resume=resume, run_name=record.train_run, parent_run_id=state.parent_run_id,
                              extra_tags={PIPELINE_TAG: state.run_name, STAGE_TAG: stage.name})
        record.train_seconds = round(time.perf_counter() - train_start, 2)
        record.train_run, record.mlflow_run_id = result.run_name, result.mlflow_run_id
        record.model_dir, record.model_artifact_uri = str(result.model_dir), result.model_artifact_uri
        record.registered_model, record.model_version = result.registered_model, result.model_version
        state.save(folder)
        for evaluation in stage.evaluations:
            record.after[evaluation.key] = _evaluate(evaluation, record.model_dir, init, state).metrics
        record.task_scores = _task_scores(cfg, record.model_dir, init, state)
    except BaseException as exc:
        record.status, record.error = FAILED, f"{type(exc).__name__}: {exc}"[:2000]
        state.save(folder)
        raise
    record.status = FINISHED
    record.seconds = round(time.perf_counter() - stage_start, 2)
    state.save(folder)
    metrics = {f"{stage.name}/train_seconds": record.train_seconds, f"{stage.name}/seconds": record.seconds}
    for key, after in record.after.items():
        for name in ("mlm_loss", "mlm_accuracy"):
            if name in after:
                metrics[f"{stage.name}/{key}/{name}_after"] = after[name]
                metrics[f"{stage.name}/{key}/{name}_before"] = record.before[key][name]
    metrics.update({f"{stage.name}/task/{task}": score for task, score in record.task_scores.items()})
    parent.log_metrics(metrics, step=index + 1)
    print(f"[lmp] {label}: finished; model {record.model_dir}", flush=True)


def _run_mine_stage(cfg: PipelineConfig, stage: StageConfig, index: int, state: PipelineState, folder: Path, parent) -> None:  # noqa: ANN001
    """A mine stage: hard negatives for its pairs, in its own MLflow run under the parent (file, metrics, params)."""
    from lmplatform.pipeline.mine import run_mine_stage

    record = state.stage(stage.name)
    init = _resolve_model(stage.init_from, state)
    record.init_model, record.status, record.error = init, RUNNING, None
    record.attempts += 1
    state.save(folder)
    label = f"stage {index + 1}/{len(cfg.stages)} {stage.name}"
    print(f"[lmp] {label}: mining hard negatives with {init}", flush=True)
    start = time.perf_counter()
    try:
        result = run_mine_stage(stage.mine, init, folder / stage.name, state.tracking_uri, cfg.tracking.experiment,
                                f"{state.run_name}.{stage.name}", state.parent_run_id,
                                {PIPELINE_TAG: state.run_name, STAGE_TAG: stage.name})
    except BaseException as exc:
        record.status, record.error = FAILED, f"{type(exc).__name__}: {exc}"[:2000]
        state.save(folder)
        raise
    record.output_path, record.mlflow_run_id = str(result.path), result.mlflow_run_id
    record.status, record.seconds = FINISHED, round(time.perf_counter() - start, 2)
    state.save(folder)
    parent.log_metrics({f"{stage.name}/seconds": record.seconds}, step=index + 1)
    print(f"[lmp] {label}: finished; {result.summary}; pairs file {result.path}", flush=True)


def _evaluate(evaluation: StageEvaluationConfig, model: str, init: str, state: PipelineState):  # noqa: ANN202
    from lmplatform.models.resolve import resolve_model_path
    from lmplatform.pipeline.evaluations import run_stage_evaluation

    head = _resolve_model(evaluation.mlm_head_from, state) if evaluation.mlm_head_from else init
    return run_stage_evaluation(str(resolve_model_path(model)), evaluation, str(resolve_model_path(head)))


def _task_scores(cfg: PipelineConfig, model: str, init: str, state: PipelineState) -> dict[str, float]:
    return {task.task: _evaluate(task, model, init, state).score for task in cfg.tasks}  # type: ignore[misc]


def _find_stage_train_run(state: PipelineState, stage: str, experiment: str) -> Optional[str]:
    """The Ray Train run name of the stage's latest attempt, from its MLflow child run's tags."""
    from mlflow.tracking import MlflowClient

    from lmplatform.train.run import RUN_TAG

    client = MlflowClient(state.tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`{PIPELINE_TAG}` = '{state.run_name}' and tags.`{STAGE_TAG}` = '{stage}'",
        order_by=["attributes.start_time DESC"], max_results=1,
    )
    return runs[0].data.tags.get(RUN_TAG) if runs else None


def _resumable_train_run(record: StageState, state: PipelineState, folder: Path, stage: str, experiment: str) -> Optional[str]:
    name = record.train_run or _find_stage_train_run(state, stage, experiment)
    return name if name and (folder / name).is_dir() else None


def forgetting_table(cfg: PipelineConfig, state: PipelineState) -> list[dict[str, object]]:
    """One row per (stage, evaluation): old-domain MLM loss before and after the stage."""
    rows: list[dict[str, object]] = []
    for stage in cfg.stages:
        record = state.stages.get(stage.name)
        if record is None:
            continue
        for key, after in record.after.items():
            before = record.before.get(key, {})
            rows.append({
                "stage": stage.name,
                "evaluation": key,
                "ewc_lambda": record.ewc_lambda,
                "mlm_loss_before": before.get("mlm_loss"),
                "mlm_loss_after": after.get("mlm_loss"),
                "mlm_loss_change": (after["mlm_loss"] - before["mlm_loss"]) if "mlm_loss" in after and "mlm_loss" in before else None,
                "mlm_accuracy_before": before.get("mlm_accuracy"),
                "mlm_accuracy_after": after.get("mlm_accuracy"),
            })
    return rows


def format_table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no evaluations)"
    columns = list(rows[0])
    cell = lambda v: "" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))  # noqa: E731
    return markdown_table(columns, [[cell(r[c]) for c in columns] for r in rows])


def task_matrix(cfg: PipelineConfig, state: PipelineState) -> Optional[list[list[float]]]:
    tasks = [t.task for t in cfg.tasks]
    if not tasks:
        return None
    # a mine stage trains no model: it has no row of R
    return [[state.stages[s.name].task_scores.get(t, float("nan")) for t in tasks] for s in cfg.stages if s.mine is None]


def _log_summary(cfg: PipelineConfig, state: PipelineState, parent, forgetting: list[dict[str, object]]) -> dict[str, float]:  # noqa: ANN001
    from lmplatform.evaluation.metrics.continual import continual_metrics

    table = format_table(forgetting)
    print("[lmp] old-domain MLM loss before/after each stage:\n" + table, flush=True)
    parent.log_dict({"rows": forgetting}, "forgetting.json")
    parent.client.log_text(parent.run_id, table + "\n", "forgetting.md")
    continual: dict[str, float] = {}
    matrix = task_matrix(cfg, state)
    if matrix is not None:
        parent.log_dict({"tasks": [t.task for t in cfg.tasks], "stages": [s.name for s in cfg.stages if s.mine is None], "R": matrix,
                         "baseline": state.baseline_task_scores}, "task_matrix.json")
        if len(matrix) == len(matrix[0]):
            baseline = [state.baseline_task_scores.get(t.task) for t in cfg.tasks]  # type: ignore[arg-type]
            continual = continual_metrics(matrix, baseline if None not in baseline else None)
            parent.log_metrics({f"cl/{k}": v for k, v in continual.items()})
            print("[lmp] continual-learning metrics: " + json.dumps({k: round(v, 4) for k, v in continual.items()}), flush=True)
        else:
            print(f"[lmp] R is {len(matrix)}x{len(matrix[0])} (stages x tasks): A/BWT/FWT need as many tasks as stages; "
                  "logged task_matrix.json only", flush=True)
    return continual
