"""Registered model versions with their index artifacts, as the serving tests and benchmarks make them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lmplatform.tracking.mlflow_tracking import get_or_create_experiment
from lmplatform.tracking.registry import register_model_version


@dataclass
class RegisteredVersion:
    version: str
    run_id: str


def register_with_index(tracking_uri: str, name: str, model_dir: Path, index_dir: Optional[Path],
                        alias: Optional[str] = None, experiment: str = "serving-test") -> RegisteredVersion:
    """One MLflow run holding model/ and index/ artifacts (none: a version without an index), registered as a new
    version of `name`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    run = client.create_run(get_or_create_experiment(tracking_uri, experiment))
    client.log_artifacts(run.info.run_id, str(model_dir), "model")
    if index_dir is not None:
        client.log_artifacts(run.info.run_id, str(index_dir), "index")
    client.set_terminated(run.info.run_id)
    version = register_model_version(tracking_uri, name, f"{run.info.artifact_uri}/model", run.info.run_id)
    if alias:
        client.set_registered_model_alias(name, alias, version)
    return RegisteredVersion(version, run.info.run_id)
