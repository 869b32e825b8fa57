"""Process-wide defaults for running offline and on loopback.

These are set with `setdefault`, so a user's own environment always wins.
"""
from __future__ import annotations

import os
from pathlib import Path

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
