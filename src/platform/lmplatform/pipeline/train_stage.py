"""The training stage kind (`config:` or `run:`): a `run_training` from the stage's start model, with the pipeline's
evaluations before and after it and the tasks' scores (rows of R for the continual-learning metrics)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig, run_stage_evaluation
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.run_config import reported_metrics
from lmplatform.pipeline.config import PipelineConfig, StageConfig, build_stage_config, resolve_references
from lmplatform.pipeline.preflight import (
    Problem,
    data_problems,
    evaluation_problems,
    file_problem,
    model_problems,
    objective_model_fields,
    run_config_problems,
)
from lmplatform.pipeline.spec import StageCheck, StageContext, StageRegistration, StageRegistrationContext
from lmplatform.pipeline.state import (
    FAILED,
    FINISHED,
    PIPELINE_TAG,
    RUNNING,
    STAGE_TAG,
    PipelineState,
    StageState,
    resolve_stage_model,
)


def run(ctx: StageContext) -> None:
    from lmplatform.jobs.train_run import new_run_name, run_training

    cfg, stage, state, folder, record = ctx.pipeline, ctx.stage, ctx.state, ctx.folder, ctx.record
    init = ctx.init
    assert init is not None
    anchor = resolve_stage_model(stage.ewc.anchor_reference, state) if stage.ewc else None
    run_cfg = build_stage_config(cfg, stage, init, str(folder), f"{state.run_name}.{stage.name}", anchor, ctx.outputs)
    record.init_model, record.status, record.error = init, RUNNING, None
    record.ewc_lambda = stage.ewc.lambda_ if stage.ewc else None
    record.attempts += 1
    state.save(folder)
    print(f"[lmp] {ctx.label}: {run_cfg.objective.name} from {init}"
          + (f", EWC λ={stage.ewc.lambda_:g} against {stage.ewc.anchor_reference}" if stage.ewc else ""), flush=True)
    stage_start = time.perf_counter()
    try:
        for evaluation in stage.evaluations:
            if evaluation.key not in record.before:
                record.before[evaluation.key] = evaluate(evaluation, init, init, state).metrics
                state.save(folder)
        resume = _resumable_train_run(record, state, folder, stage.name, run_cfg.tracking.experiment)
        if resume:
            print(f"[lmp] {ctx.label}: continuing its Ray Train run {resume}", flush=True)
        # Recorded before training starts, so a stage killed at any point can be continued.
        record.train_run = resume or new_run_name(run_cfg)
        state.save(folder)
        train_start = time.perf_counter()
        result = run_training(run_cfg, resume=resume, run_name=record.train_run, parent_run_id=state.parent_run_id,
                              extra_tags={PIPELINE_TAG: state.run_name, STAGE_TAG: stage.name},
                              callbacks=ctx.callbacks or None)
        record.train_seconds = round(time.perf_counter() - train_start, 2)
        record.train_run, record.mlflow_run_id = result.run_name, result.mlflow_run_id
        record.model_run_id = result.mlflow_run_id
        record.model_dir, record.model_artifact_uri = str(result.model_dir), result.model_artifact_uri
        record.registered_model, record.model_version = result.registered_model, result.model_version
        record.metrics = dict(result.metrics)
        state.save(folder)
        for evaluation in stage.evaluations:
            record.after[evaluation.key] = evaluate(evaluation, record.model_dir, init, state).metrics
        record.task_scores = task_scores(cfg, record.model_dir, init, state)
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
    ctx.parent.log_metrics(metrics, step=ctx.index + 1)
    print(f"[lmp] {ctx.label}: finished; model {record.model_dir}", flush=True)


def evaluate(evaluation: StageEvaluationConfig, model: str, init: str, state: PipelineState) -> Any:
    head = resolve_stage_model(evaluation.mlm_head_from, state) if evaluation.mlm_head_from else init
    return run_stage_evaluation(str(resolve_model_path(model)), evaluation, str(resolve_model_path(head)))


def task_scores(cfg: PipelineConfig, model: str, init: str, state: PipelineState) -> dict[str, float]:
    return {task.task: evaluate(task, model, init, state).score for task in cfg.tasks}  # type: ignore[misc]


def _find_stage_train_run(state: PipelineState, stage: str, experiment: str) -> Optional[str]:
    """The Ray Train run name of the stage's latest attempt, from its MLflow child run's tags."""
    from mlflow.tracking import MlflowClient

    from lmplatform.jobs.train_run import RUN_TAG

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


def problems(ctx: StageCheck) -> list[Problem]:
    """Its run config after `set:` (the pipeline sets model and EWC itself), init_from, EWC, evaluations."""
    stage, where, will_run, finished = ctx.stage, ctx.where, ctx.will_run, ctx.finished
    # Placeholders for the models: the stage's own references are checked below, under their own field names.
    run = build_stage_config(ctx.pipeline, stage, "default", "runs", "preflight",
                             ewc_anchor_model="default" if stage.ewc else None)
    objective_models = objective_model_fields(run)  # may name earlier stages: checked below with `will_run`
    found = run_config_problems(run, where, skip=("model", "ewc", *objective_models))
    found += model_problems(stage.init_from, "init_from", where, will_run, finished)
    for field in objective_models:
        found += model_problems(getattr(run.objective, field.split(".", 1)[1]), field, where, will_run, finished)
    if stage.ewc is not None:
        ewc = stage.ewc
        found += model_problems(ewc.anchor_reference, "ewc.anchor" if ewc.anchor else "ewc.anchor_model", where,
                                will_run, finished)
        if ewc.data is not None:
            found += data_problems(ewc.data.train_paths, "ewc.data.train_paths", where)
            found += data_problems(ewc.data.validation_paths, "ewc.data.validation_paths", where)
        found += file_problem(ewc.fisher_path, "ewc.fisher_path", where)
    for evaluation in stage.evaluations:
        found += evaluation_problems(evaluation, f"evaluations.{evaluation.key}", where, will_run, finished)
    return found


def reuse_content(ctx: StageContext) -> dict[str, Any]:
    """Its run config with the start model, EWC anchor and earlier stages' outputs resolved, its evaluations and the
    pipeline's tasks."""
    stage = ctx.stage
    assert ctx.init is not None
    anchor = resolve_stage_model(stage.ewc.anchor_reference, ctx.state) if stage.ewc else None
    run_cfg = build_stage_config(ctx.pipeline, stage, ctx.init, "runs", "reuse-key", anchor, ctx.outputs)
    evaluations = [resolve_references(e.model_dump(mode="json"), ctx.outputs) for e in stage.evaluations]
    return {"run": run_cfg.model_dump(mode="json", by_alias=True), "evaluations": evaluations,
            "tasks": [t.model_dump(mode="json") for t in ctx.pipeline.tasks]}


def _placeholder_run(pipeline: PipelineConfig, stage: StageConfig) -> Any:
    """Its run config with placeholders for what only a run knows (earlier stages' models)."""
    return build_stage_config(pipeline, stage, "default", "runs", "check", ewc_anchor_model="default" if stage.ewc else None)


def cpus(pipeline: PipelineConfig, stage: StageConfig) -> float:
    run = _placeholder_run(pipeline, stage)
    return run.scaling.num_workers * run.scaling.cpus_per_worker


def metric_names(pipeline: PipelineConfig, stage: StageConfig) -> set[str]:
    cfg = _placeholder_run(pipeline, stage)
    # as a study's trial runs it: without the validation of its start model (tune/pipeline_trial.py)
    return reported_metrics(cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"validate_at_start": False})}))


def registration(ctx: StageRegistrationContext) -> StageRegistration:
    return StageRegistration(source=ctx.stage.name, default_name=f"{ctx.pipeline.name}-{ctx.stage.name}")
