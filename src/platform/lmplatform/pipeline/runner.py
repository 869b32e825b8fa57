"""Run a pipeline: each stage is a `run_training` (or a mine or pairs step) nested under one MLflow parent run.

A stage's exported model folder is the next stage's starting model (`init_from:
stage:<name>`) and the θ* of a later EWC stage (`ewc.anchor`). The state file
records finished stages; `resume=<pipeline run>` skips them and continues the
unfinished stage, from its Ray Train checkpoint when it had one. With stage reuse
on (`reuse.enabled`, or a study's pipeline trials), a stage whose resolved config
and inputs match an earlier run's is not run again (`cache.py`).
"""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from lmplatform.markdown import markdown_table
from lmplatform.metrics.continual import continual_metrics
from lmplatform.pipeline.cache import CachedStage, StageCache, stage_key
from lmplatform.pipeline.config import PipelineConfig, StageConfig, resolve_references
from lmplatform.pipeline.preflight import preflight_pipeline
from lmplatform.pipeline.spec import StageContext
from lmplatform.pipeline.stage_run import cache_folder
from lmplatform.pipeline.state import FINISHED, PIPELINE_TAG, STAGE_TAG, PipelineState, resolve_stage_model
from lmplatform.pipeline.train_stage import task_scores
from lmplatform.ray_runtime import ensure_ray
from lmplatform.runtime import resolve_storage_path, resolve_tracking_uri
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten

REUSED_TAG = "lmp.stage_reused_from"
REPORTS_FILE = "reports.jsonl"
# What a reused stage takes over from the run that made it.
REUSED_FIELDS = ("init_model", "train_run", "model_dir", "model_run_id", "output_path", "outputs", "model_artifact_uri",
                 "registered_model", "model_version", "ewc_lambda", "before", "after", "task_scores", "metrics", "search",
                 "reranker_run_id", "train_seconds")


class StageReporter(Protocol):
    """Where a pipeline's stages report while they run (a study's trial forwards them to Tune)."""

    def training_callbacks(self, stage: str) -> list[Any]:
        """Ray Train callbacks for a training stage (they see each report of its workers)."""

    def replay(self, stage: str, reports: list[dict[str, Any]]) -> None:
        """The reports of a reused stage, in the order it sent them when it ran."""


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


def run_pipeline(cfg: PipelineConfig, resume: Optional[str] = None, *, run_name: Optional[str] = None,
                 parent_run_id: Optional[str] = None, tags: Optional[dict[str, str]] = None,
                 params: Optional[dict[str, Any]] = None, reporter: Optional[StageReporter] = None) -> PipelineResult:
    """Run (or continue) every stage; raises `PreflightError` before anything starts when a stage's
    data file or model is missing.

    `run_name` names a new run, or continues it when its state exists (a study's trial run again after a
    restore); `parent_run_id` nests the pipeline's MLflow run (a study's run), `tags` and `params` (a trial's
    values) are logged on it; `reporter` receives the stages' reports as they happen."""
    root = Path(resolve_storage_path(cfg.storage_path))
    if run_name and not resume and PipelineState.path(root / run_name).is_file():
        resume = run_name
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
        run_name = run_name or new_pipeline_run_name(cfg)
        folder = root / run_name
        tracking_uri = resolve_tracking_uri(cfg.tracking.tracking_uri)
        parent, _ = TrackedRun.start_or_resume(tracking_uri, cfg.tracking.experiment, run_name, None,
                                               lambda: {PIPELINE_TAG: run_name, "lmp.pipeline": cfg.name, **(tags or {})},
                                               parent_run_id)
        dumped = cfg.model_dump(mode="json", by_alias=True)
        parent.log_params(flatten({k: v for k, v in dumped.items() if k != "stages"})
                          | {f"stage.{i}": s["name"] for i, s in enumerate(dumped["stages"])} | (params or {}))
        parent.log_dict(dumped, "pipeline.json")
        state = PipelineState(cfg.name, run_name, parent.run_id, tracking_uri)
        state.save(folder)
        print(f"[lmp] pipeline {run_name}: {len(cfg.stages)} stage(s); MLflow parent run {parent.run_id}; "
              f"state in {PipelineState.path(folder)}", flush=True)

    ensure_ray()
    cache = StageCache(cache_folder(cfg, folder)) if cfg.reuse.enabled else None
    try:
        if cfg.tasks and not state.baseline_task_scores:
            start = resolve_stage_model(cfg.stages[0].init_from, state)
            state.baseline_task_scores = task_scores(cfg, start, start, state)
            state.save(folder)
        for index, stage in enumerate(cfg.stages):
            record = state.stage(stage.name)
            if record.status == FINISHED:
                print(f"[lmp] stage {index + 1}/{len(cfg.stages)} {stage.name}: finished earlier, skipped", flush=True)
                continue
            if cache is None:
                _run_any_stage(cfg, stage, index, state, folder, parent, reporter)
            else:
                _run_or_reuse(cache, cfg, stage, index, state, folder, parent, reporter)
    except BaseException:
        parent.finish("FAILED")
        print(f"[lmp] pipeline {state.run_name} failed; continue it with --resume {state.run_name}", flush=True)
        raise
    forgetting = forgetting_table(cfg, state)
    continual = _log_summary(cfg, state, parent, forgetting)
    if cache is not None:
        reused = sum(1 for s in cfg.stages if state.stages[s.name].reused_from)
        parent.log_metrics({"stages_reused": float(reused), "stages_run": float(len(cfg.stages) - reused)})
        print(f"[lmp] pipeline {state.run_name}: {reused} of {len(cfg.stages)} stage(s) reused", flush=True)
    parent.finish()
    return PipelineResult(state.run_name, state.parent_run_id, state.tracking_uri, folder, state, forgetting, continual)


def stage_outputs(state: PipelineState) -> dict[str, str]:
    """What finished stages made, by the reference that names it (`resolve_references`): a mine stage's pairs
    file, a pairs stage's files (`<name>/<split>`), a training stage's model folder."""
    outputs: dict[str, str] = {}
    for name, done in state.stages.items():
        if done.status != FINISHED:
            continue
        if done.output_path:
            outputs[name] = done.output_path
        if done.model_dir:
            outputs[name] = done.model_dir
        outputs |= {f"{name}/{split}": path for split, path in done.outputs.items()}
    return outputs


def stage_context(cfg: PipelineConfig, stage: StageConfig, index: int, state: PipelineState, folder: Path,
                  parent: Any = None, callbacks: Optional[list[Any]] = None) -> StageContext:
    """What the stage's kind runs with: its section with every `stage:` reference resolved, its start model."""
    spec, outputs = stage.spec, stage_outputs(state)
    section = (spec.section.model_validate(resolve_references(stage.section.model_dump(mode="json"), outputs))
               if spec.section is not None else None)
    init = resolve_stage_model(stage.init_from, state) if spec.uses_init else None
    return StageContext(cfg, stage, section, init, state, folder, index, outputs, parent, callbacks or [])


def _run_any_stage(cfg: PipelineConfig, stage: StageConfig, index: int, state: PipelineState, folder: Path, parent: Any,
                   reporter: Optional[StageReporter], report_log: Optional[Path] = None) -> None:
    record = state.stage(stage.name)
    record.started_at, record.finished_at, record.reused_from = time.time(), None, None
    callbacks = reporter.training_callbacks(stage.name) if reporter is not None and stage.spec.trains else []
    if report_log is not None and stage.spec.trains:
        from lmplatform.pipeline.reports import ReportLog

        callbacks.append(ReportLog(report_log))
    stage.spec.module().run(stage_context(cfg, stage, index, state, folder, parent, callbacks))
    record.finished_at = time.time()
    state.save(folder)


def stage_content(cfg: PipelineConfig, stage: StageConfig, state: PipelineState) -> dict[str, Any]:
    """The stage's config with every reference resolved: what decides what it produces (its reuse key)."""
    return stage.spec.module().reuse_content(stage_context(cfg, stage, -1, state, Path(".")))


def _run_or_reuse(cache: StageCache, cfg: PipelineConfig, stage: StageConfig, index: int, state: PipelineState,
                  folder: Path, parent: Any, reporter: Optional[StageReporter]) -> None:
    """Reuse the stage's cache entry if there is one, else run it and store one; concurrent runs of the same
    stage wait for the first (see cache.py)."""
    from lmplatform.pipeline.reports import read_reports

    key = stage_key(stage.kind, stage_content(cfg, stage, state))
    record = state.stage(stage.name)
    record.cache_key = key
    with cache.hold(key):
        hit = cache.lookup(key, state.tracking_uri)
        if hit is not None:
            _reuse_stage(hit, cfg, stage, index, state, folder, parent, reporter)
            return
        report_log = folder / stage.name / REPORTS_FILE
        if record.attempts == 0 and report_log.exists():
            report_log.unlink()  # left by a run of this name that never recorded an attempt; a resumed attempt appends
        _run_any_stage(cfg, stage, index, state, folder, parent, reporter, report_log)
        outputs = {"model_dir": record.model_dir, "output_path": record.output_path} | dict(record.outputs)
        cache.store(CachedStage(key, stage.name, stage.kind, state.run_name, outputs,
                                {name: getattr(record, name) for name in (*REUSED_FIELDS, "mlflow_run_id", "seconds")},
                                read_reports(report_log), state.tracking_uri))


def _reuse_stage(hit: CachedStage, cfg: PipelineConfig, stage: StageConfig, index: int, state: PipelineState,
                 folder: Path, parent: Any, reporter: Optional[StageReporter]) -> None:
    """Take over a cached stage's outputs and results; its own MLflow run points at the run that made them."""
    record = state.stage(stage.name)
    record.started_at = time.time()
    for name in REUSED_FIELDS:
        if name in hit.record:
            setattr(record, name, hit.record[name])
    origin = f"{hit.pipeline_run}/{hit.stage}"
    run = TrackedRun.start(state.tracking_uri, cfg.tracking.experiment, f"{state.run_name}.{stage.name}",
                           {PIPELINE_TAG: state.run_name, STAGE_TAG: stage.name, REUSED_TAG: origin,
                            "lmp.reused_mlflow_run": hit.record.get("mlflow_run_id") or "", "lmp.stage_cache_key": hit.key},
                           state.parent_run_id)
    run.log_metrics({k: v for k, v in record.metrics.items() if isinstance(v, (int, float))})
    run.finish()
    record.mlflow_run_id, record.reused_from, record.status, record.error = run.run_id, origin, FINISHED, None
    record.finished_at = time.time()
    record.seconds = round(record.finished_at - record.started_at, 2)
    state.save(folder)
    if reporter is not None and hit.reports:
        reporter.replay(stage.name, hit.reports)
    print(f"[lmp] stage {index + 1}/{len(cfg.stages)} {stage.name}: reused from {origin} (same config and inputs, "
          f"key {hit.key}); ran there in {hit.record.get('seconds') or 0:.0f} s", flush=True)


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
                "mlm_loss_change": ((after["mlm_loss"] - before["mlm_loss"])
                                    if "mlm_loss" in after and "mlm_loss" in before else None),
                "mlm_accuracy_before": before.get("mlm_accuracy"),
                "mlm_accuracy_after": after.get("mlm_accuracy"),
            })
    return rows


def format_table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no evaluations)"
    columns = list(rows[0])
    cell = lambda v: "" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))
    return markdown_table(columns, [[cell(r[c]) for c in columns] for r in rows])


def task_matrix(cfg: PipelineConfig, state: PipelineState) -> Optional[list[list[float]]]:
    tasks = [t.task for t in cfg.tasks]
    if not tasks:
        return None
    # a stage that trains no model has no row of R
    return [[state.stages[s.name].task_scores.get(t, float("nan")) for t in tasks] for s in cfg.stages if s.spec.trains]


def _log_summary(cfg: PipelineConfig, state: PipelineState, parent, forgetting: list[dict[str, object]]) -> dict[str, float]:
    table = format_table(forgetting)
    print("[lmp] old-domain MLM loss before/after each stage:\n" + table, flush=True)
    parent.log_dict({"rows": forgetting}, "forgetting.json")
    parent.client.log_text(parent.run_id, table + "\n", "forgetting.md")
    continual: dict[str, float] = {}
    matrix = task_matrix(cfg, state)
    if matrix is not None:
        parent.log_dict({"tasks": [t.task for t in cfg.tasks], "stages": [s.name for s in cfg.stages if s.spec.trains],
                         "R": matrix, "baseline": state.baseline_task_scores}, "task_matrix.json")
        if len(matrix) == len(matrix[0]):
            baseline = [state.baseline_task_scores.get(t.task) for t in cfg.tasks]  # type: ignore[arg-type]
            continual = continual_metrics(matrix, baseline if None not in baseline else None)
            parent.log_metrics({f"cl/{k}": v for k, v in continual.items()})
            print("[lmp] continual-learning metrics: " + json.dumps({k: round(v, 4) for k, v in continual.items()}), flush=True)
        else:
            print(f"[lmp] R is {len(matrix)}x{len(matrix[0])} (stages x tasks): A/BWT/FWT need as many tasks as stages; "
                  "logged task_matrix.json only", flush=True)
    return continual
