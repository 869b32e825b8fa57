"""MLflow runs for training: the driver opens the run, rank 0 logs step metrics to it.

Default store: sqlite under <project>/mlruns (no server), artifacts beside it.
Any URI works through config or MLFLOW_TRACKING_URI.
"""
from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

logger = logging.getLogger(__name__)
_PARAM_VALUE_LIMIT = 6000


def _artifact_root(tracking_uri: str) -> Optional[str]:
    # sqlite stores put artifacts next to the database instead of ./mlruns of the cwd.
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri[len("sqlite:///"):]).parent / "artifacts").resolve().as_uri()
    return None


def get_or_create_experiment(tracking_uri: str, name: str) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=_artifact_root(tracking_uri))
    except Exception:
        # Another process created it between our lookup and create.
        existing = client.get_experiment_by_name(name)
        if existing is None:
            raise
        return existing.experiment_id


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def git_commit(cwd: Optional[Path] = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        commit = out.stdout.strip()
        if out.returncode == 0 and commit:
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=cwd or Path(__file__).parent, capture_output=True, text=True, timeout=5,
            ).stdout.strip()
            return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


class TrackedRun:
    """An MLflow run addressed by id, usable from any process that reaches the store."""

    def __init__(self, tracking_uri: str, run_id: str):
        from mlflow.tracking import MlflowClient

        self.tracking_uri = tracking_uri
        self.run_id = run_id
        self.client = MlflowClient(tracking_uri)

    @classmethod
    def start(
        cls,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        tags: Mapping[str, str] = (),  # type: ignore[assignment]
        parent_run_id: Optional[str] = None,
    ) -> "TrackedRun":
        from mlflow.tracking import MlflowClient

        experiment_id = get_or_create_experiment(tracking_uri, experiment)
        all_tags = {"mlflow.runName": run_name, **dict(tags or {})}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = MlflowClient(tracking_uri).create_run(experiment_id, tags=all_tags, run_name=run_name)
        return cls(tracking_uri, run.info.run_id)

    @classmethod
    def start_or_resume(
        cls,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        resume_run_id: Optional[str],
        new_run_tags: Callable[[], Mapping[str, str]] = dict,
        parent_run_id: Optional[str] = None,
    ) -> tuple["TrackedRun", bool]:
        """The run a job logs into, and whether it is new (a training run, a study's or a pipeline's parent run).

        With `resume_run_id` (the job is continued), that run, marked RUNNING again; otherwise a new run
        in `experiment` tagged with `new_run_tags()`, called only then. The caller logs what a run records
        once (params, the data report, the config) when it is new.
        """
        if resume_run_id:
            run = cls(tracking_uri, resume_run_id)
            run.client.update_run(resume_run_id, status="RUNNING")
            return run, False
        return cls.start(tracking_uri, experiment, run_name, new_run_tags(), parent_run_id), True

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(self.run_id).data.params
        items = [
            Param(key, str(value)[:_PARAM_VALUE_LIMIT])
            for key, value in params.items()
            if key not in existing  # params are immutable; a resumed run keeps its originals
        ]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(_metric_key(key), float(value), now, step or 0)
            for key, value in metrics.items()
            if value is not None and value == value  # drop NaN
        ]
        for start in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[start : start + 500])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))

    def log_artifacts(self, local_dir: str | Path, artifact_path: Optional[str] = None) -> str:
        self.client.log_artifacts(self.run_id, str(local_dir), artifact_path)
        return self.artifact_uri(artifact_path)

    def log_artifact(self, local_file: str | Path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifact(self.run_id, str(local_file), artifact_path)

    def log_dict(self, data: Any, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, data, artifact_file)

    def artifact_uri(self, artifact_path: Optional[str] = None) -> str:
        root = self.client.get_run(self.run_id).info.artifact_uri
        return f"{root}/{artifact_path}" if artifact_path else root

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


def _metric_key(key: str) -> str:
    # MLflow keys allow alphanumerics, _ - . space / ; map anything else to _.
    return "".join(ch if ch.isalnum() or ch in "_-. /" else "_" for ch in key)
