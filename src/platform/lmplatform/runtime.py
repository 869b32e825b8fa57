"""Process-wide defaults for running offline and on loopback, and the places a run is anchored to.

The variables are set with `setdefault`, so a user's own environment always wins. Relative places (the MLflow
store, Ray Train storage) are made absolute under `project_root()` here, because Ray workers run in their own
working directories.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

__all__ = ["apply_runtime_defaults", "resolve_storage_path"]  # what tools may use (lazy_exports.py)

# Variables every process of a run needs (driver, Train workers, Serve replicas).
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray's internal ports on 127.0.0.1 when
# that is the node address; without it in *every* process drivers hang with
# "Failed to get cluster ID from GCS server". RAY_AUTH_MODE=disabled stops a fresh
# local cluster from turning token auth on, which later breaks drivers that
# connect without a token.
RUNTIME_ENV_DEFAULTS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # Hugging Face's load/save progress bars ("Loading weights", "Writing model shards"; transformers reads
    # it at import): two bar lines per model load or checkpoint, in every worker, on the console.
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "RAY_TRAIN_V2_ENABLED": "1",
    # Offline by design: Ray would otherwise run a usage-report collector (a dashboard module and, with Ray Data, an
    # actor per cluster) for reports it cannot send.
    "RAY_USAGE_STATS_ENABLED": "0",
}


def apply_runtime_defaults() -> None:
    for key, value in RUNTIME_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


def worker_env_vars() -> dict[str, str]:
    """The variables to forward to Ray workers that may run on other nodes."""
    return {key: os.environ.get(key, value) for key, value in RUNTIME_ENV_DEFAULTS.items()}


def project_root() -> Path:
    """The folder runs are anchored to: `LMP_HOME` if set, else the working directory."""
    return Path(os.environ.get("LMP_HOME", os.getcwd())).resolve()


def default_tracking_uri() -> str:
    root = project_root() / "mlruns"
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


def resolve_tracking_uri(configured: Optional[str] = None) -> str:
    """The tracking URI every process of a run uses; a relative sqlite path is made absolute here,
    because Ray workers run in their own working directories and would open another database."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = f"sqlite:///{Path(uri[len('sqlite:///'):]).resolve()}"
    return uri


def resolve_storage_path(storage_path: str) -> str:
    """Ray Train storage (`checkpoint.storage_path`): a URI as is, a relative folder under `project_root()`."""
    if "://" in storage_path:
        return storage_path
    path = Path(storage_path).expanduser()
    return str(path if path.is_absolute() else (project_root() / path).resolve())


def trim_heap() -> None:
    """Hand the C heap's free pages back to the operating system (glibc's `malloc_trim`). A load that builds large
    short-lived objects (a live index's BM25 over 10^6 report texts) otherwise keeps its peak resident: freed, but
    held by the allocator. Nothing happens where the C library is not glibc."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
