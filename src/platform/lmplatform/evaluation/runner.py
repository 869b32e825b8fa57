"""Run an `EvaluationConfig`: each task writes its part, the runner writes the report and logs to MLflow.

A task runs by its registered spec (`evaluation/registry.py`): `run(task_config, output_dir, models) -> TaskResult`
(`tasks.common.TaskResult`; `models` is a `ModelCache` shared by all tasks of one evaluation).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lmplatform.data.readers import DataError
from lmplatform.evaluation.config import EvaluationConfig
from lmplatform.evaluation.registry import evaluation_spec
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.tracking.mlflow_tracking import TrackedRun

logger = logging.getLogger(__name__)

# Dataset fields that name input files, checked for every task before any task starts.
DATA_FILE_FIELDS = ("corpus", "relations", "path", "fit_path", "train", "dev", "test")


@dataclass
class EvaluationResult:
    output_dir: Path
    report_json: Path
    report_md: Path
    metrics: dict[str, float]
    mlflow_run_id: Optional[str]
    tasks: list[TaskResult]


def model_run_id(model_uri: str, tracking_uri: str) -> Optional[str]:
    """The MLflow run that produced a registered model version (`models:/name@alias` or `models:/name/3`)."""
    from mlflow.tracking import MlflowClient

    if not model_uri.startswith("models:/"):
        return None
    ref = model_uri[len("models:/"):]
    client = MlflowClient(tracking_uri)
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return client.get_model_version_by_alias(name, alias).run_id
    name, _, version = ref.rpartition("/")
    return client.get_model_version(name, version).run_id if name else None


def _models_evaluated(cfg: EvaluationConfig) -> list[str]:
    out = []
    for task in cfg.tasks:
        specs = getattr(task, "retrievers", None) or getattr(task, "encoders", [])
        out += [s.model for s in specs if s.model]
    return out


def check_data_files(cfg: EvaluationConfig) -> None:
    """Fail before any model is loaded if a dataset names a file that is not there."""
    missing = []
    for number, task in enumerate(cfg.tasks):
        for ds in task.datasets:
            for name in DATA_FILE_FIELDS:
                value = getattr(ds, name, None)
                if isinstance(value, str) and not Path(value).is_file():
                    missing.append(f"tasks.{number} ({task.task}) dataset {ds.name!r} field {name!r}: file not found: {value}")
    if missing:
        raise DataError("; ".join(missing))


def run_evaluation(cfg: EvaluationConfig) -> EvaluationResult:
    output_dir = Path(cfg.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    check_data_files(cfg)
    started = time.time()
    models = ModelCache()
    results = [evaluation_spec(task.task).run(task, output_dir, models) for task in cfg.tasks]
    metrics = {f"{r.task}.{k}": v for r in results for k, v in r.metrics.items()}
    report = {
        "name": cfg.name, "config": cfg.model_dump(mode="json"), "seconds": round(time.time() - started, 2),
        "tasks": {r.task: r.details for r in results},
    }
    report_json = output_dir / "report.json"
    report_md = output_dir / "report.md"
    report_md.write_text(f"# Evaluation: {cfg.name}\n\n" + "\n".join(r.markdown for r in results))

    run_id = None
    if cfg.tracking.enabled:
        tracking_uri = resolve_tracking_uri(cfg.tracking.tracking_uri)
        run_id = cfg.tracking.run_id
        if run_id is None:
            for model in _models_evaluated(cfg):
                try:
                    run_id = model_run_id(model, tracking_uri)
                except Exception as exc:  # the model may be registered in another store
                    logger.warning("could not find the MLflow run of %s: %s", model, exc)
                if run_id:
                    break
        if run_id:
            run = TrackedRun(tracking_uri, run_id)
        else:
            run = TrackedRun.start(tracking_uri, cfg.tracking.experiment, cfg.tracking.run_name or f"eval-{cfg.name}",
                                   tags={"lmplatform.kind": "evaluation"})
        prefix = f"eval.{cfg.name}"
        run.log_metrics({f"{prefix}.{k}": v for k, v in metrics.items()})
        run.log_params({f"{prefix}.output_dir": str(output_dir), f"{prefix}.tasks": ",".join(r.task for r in results)})
        run.set_tags({"lmplatform.evaluated": cfg.name})
        report["mlflow"] = {"tracking_uri": tracking_uri, "run_id": run.run_id}
        report_json.write_text(json.dumps(report, indent=2))
        run.log_artifacts(output_dir, f"evaluation/{cfg.name}")
        if run_id is None:  # a run we started; runs of evaluated models are left as they were
            run.finish()
        run_id = run.run_id
    else:
        report_json.write_text(json.dumps(report, indent=2))
    return EvaluationResult(output_dir, report_json, report_md, metrics, run_id, results)
