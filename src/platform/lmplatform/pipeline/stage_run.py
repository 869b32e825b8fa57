"""What every kind of stage that trains nothing does around its own work: its record's status, attempts, time and
metrics, its MLflow run's names and tags, its cache key's content, and its line when it finishes."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Protocol

from lmplatform.pipeline.config import PipelineConfig
from lmplatform.pipeline.spec import StageContext
from lmplatform.pipeline.state import FAILED, FINISHED, PIPELINE_TAG, RUNNING, STAGE_TAG
from lmplatform.runtime import resolve_storage_path


class StageResult(Protocol):
    """What a stage's own work returns: its MLflow run, its metrics and a one-line summary."""

    mlflow_run_id: str
    metrics: dict[str, float]

    @property
    def summary(self) -> str: ...


def stage_tracking(ctx: StageContext) -> tuple[str, str, str, str, dict[str, str]]:
    """(tracking URI, experiment, run name, parent run id, tags) of the stage's own MLflow run."""
    state = ctx.state
    return (state.tracking_uri, ctx.pipeline.tracking.experiment, f"{state.run_name}.{ctx.stage.name}",
            state.parent_run_id, {PIPELINE_TAG: state.run_name, STAGE_TAG: ctx.stage.name})


def cache_folder(cfg: PipelineConfig, folder: Path) -> Path:
    """Where reused stages (and reused encodings) are kept: `reuse.path`, or `stage-cache` beside the pipeline runs."""
    return Path(resolve_storage_path(cfg.reuse.path)) if cfg.reuse.path else folder.parent / "stage-cache"


def run_untrained(ctx: StageContext, work: Callable[[], StageResult]) -> None:
    """Run a stage's `work` in its own MLflow run under the parent, keeping its record: running, then finished (with
    the run, metrics and time) or failed (with the error)."""
    record = ctx.record
    record.init_model, record.status, record.error = ctx.init, RUNNING, None
    record.attempts += 1
    ctx.state.save(ctx.folder)
    start = time.perf_counter()
    try:
        result = work()
    except BaseException as exc:
        record.status, record.error = FAILED, f"{type(exc).__name__}: {exc}"[:2000]
        ctx.state.save(ctx.folder)
        raise
    record.mlflow_run_id, record.metrics = result.mlflow_run_id, dict(result.metrics)
    record.status, record.seconds = FINISHED, round(time.perf_counter() - start, 2)
    ctx.state.save(ctx.folder)
    ctx.parent.log_metrics({f"{ctx.stage.name}/seconds": record.seconds}, step=ctx.index + 1)
    print(f"[lmp] {ctx.label}: finished; {result.summary}", flush=True)


def section_content(ctx: StageContext) -> dict[str, Any]:
    """A stage's cache-key content when its resolved section (and the model it starts from) decides what it makes."""
    content = {ctx.stage.kind: ctx.section.model_dump(mode="json")}
    return content | ({"init": ctx.init} if ctx.stage.spec.uses_init else {})

