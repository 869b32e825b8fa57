"""The MLflow model registry: register a model folder, resolve aliases, download."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Optional

from lmplatform.tracking.mlflow_tracking import resolve_tracking_uri


def register_model_version(
    tracking_uri: str, name: str, source: str, run_id: str, tags: Optional[dict[str, Any]] = None, description: str = ""
) -> str:
    """Create a version of `name` from an artifact URI holding a Hugging Face folder, with its MODEL_CARD.md."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code) and "already exists" not in str(exc):
            raise
    version = client.create_model_version(
        name, source=source, run_id=run_id, tags={k: str(v) for k, v in (tags or {}).items()}, description=description
    )
    from lmplatform.tracking.model_card import try_write_model_card

    try_write_model_card(tracking_uri, name, str(version.version))  # every version has a card from the start
    return str(version.version)


def download_model(uri: str, tracking_uri: Optional[str] = None, dst: Optional[str | Path] = None) -> Path:
    """Fetch `models:/name@alias`, `models:/name/version` or `runs:/id/path` into a local folder."""
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    from lmplatform.models.resolve import ModelNotFoundError

    tracking_uri = resolve_tracking_uri(tracking_uri)
    client = MlflowClient(tracking_uri)
    source = uri
    try:
        if uri.startswith("models:/"):
            source = model_version_source(client, uri)
        target = Path(dst or tempfile.mkdtemp(prefix="lmp-model-"))
        local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(target), tracking_uri=tracking_uri)
    except Exception as exc:
        raise ModelNotFoundError(f"cannot load {uri} from MLflow at {tracking_uri}: {exc}") from exc
    path = Path(local)
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"{uri} resolved to {source}, which holds no Hugging Face model folder")
    return path


def model_version_source(client: Any, uri: str) -> str:
    """The artifact URI behind models:/name@alias or models:/name/version."""
    spec = uri[len("models:/"):]
    if "@" in spec:
        name, alias = spec.split("@", 1)
        version = client.get_model_version_by_alias(name, alias)
    else:
        name, _, number = spec.partition("/")
        if not number:
            raise ValueError(f"{uri}: expected models:/<name>@<alias> or models:/<name>/<version>")
        version = client.get_model_version(name, number)
    return version.source
