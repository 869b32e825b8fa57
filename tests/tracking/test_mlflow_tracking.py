"""Where runs are tracked: every process of a run must resolve the same database."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.runtime import resolve_tracking_uri


def test_a_relative_sqlite_uri_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # A Ray worker runs in its own working directory: a relative path there names another file.
    assert resolve_tracking_uri("sqlite:///runs/mlflow.db") == f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert resolve_tracking_uri("sqlite:////srv/mlflow.db") == "sqlite:////srv/mlflow.db"
    assert resolve_tracking_uri("http://mlflow:5000") == "http://mlflow:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///db/m.db")
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path / 'db' / 'm.db'}"


def test_start_or_resume_opens_a_new_run_once_and_reopens_it_on_resume(mlflow_uri: str) -> None:
    from lmplatform.tracking.mlflow_tracking import TrackedRun

    asked = []

    def tags() -> dict[str, str]:
        asked.append(1)
        return {"lmp.kind": "test"}

    run, new = TrackedRun.start_or_resume(mlflow_uri, "tests", "first", None, tags)
    assert new and asked == [1]
    assert run.client.get_run(run.run_id).data.tags["lmp.kind"] == "test"
    run.finish("FAILED")
    again, new = TrackedRun.start_or_resume(mlflow_uri, "tests", "ignored", run.run_id, tags)
    assert not new and again.run_id == run.run_id and asked == [1]  # a resumed run's tags are not recomputed
    assert again.client.get_run(run.run_id).info.status == "RUNNING"
