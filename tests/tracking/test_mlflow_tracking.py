"""Where runs are tracked: every process of a run must resolve the same database."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.tracking.mlflow_tracking import resolve_tracking_uri


def test_a_relative_sqlite_uri_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # A Ray worker runs in its own working directory: a relative path there names another file.
    assert resolve_tracking_uri("sqlite:///runs/mlflow.db") == f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert resolve_tracking_uri("sqlite:////srv/mlflow.db") == "sqlite:////srv/mlflow.db"
    assert resolve_tracking_uri("http://mlflow:5000") == "http://mlflow:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///db/m.db")
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path / 'db' / 'm.db'}"
