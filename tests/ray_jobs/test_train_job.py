"""`ray job submit` of ray_jobs/train.py to a real Ray cluster on 127.0.0.1."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
pytestmark = pytest.mark.ray


def _env() -> dict[str, str]:
    """Like an activated venv: the job's `python` must be the one lmplatform is installed in."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("RAY_ADDRESS", None)
    return env


def _wait_for_job_agent(url: str, deadline: float) -> None:
    """The dashboard answers before the node's job agent does; submit a no-op job until one is accepted."""
    from ray.job_submission import JobSubmissionClient

    while True:
        try:
            JobSubmissionClient(url).submit_job(entrypoint="true")
            return
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.time() > deadline:
                raise
            time.sleep(2)


@pytest.fixture(scope="module")
def head_node(ray_dashboard_url: str) -> str:
    """The session's local Ray, as a cluster address jobs are submitted to.

    Jobs go to the test session's own Ray rather than a second `ray start` head: Ray
    components resolve "auto" addresses by scanning the host, and two instances on one
    machine make that ambiguous.
    """
    # A safety net, not a timing assertion: on a loaded 2-core machine the job agent took over 2 minutes.
    _wait_for_job_agent(ray_dashboard_url, time.time() + 300)
    return ray_dashboard_url


def test_train_job_runs_through_ray_job_submit(head_node: str, tiny_bert: Path, corpus_file: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = _env()
    command = [
        RAY, "job", "submit", "--address", head_node, "--working-dir", str(REPO),
        "--runtime-env", str(REPO / "ray_jobs/runtime_env.yaml"), "--",
        "python", "ray_jobs/train.py", "--config", "configs/mlm.yaml",
        "--set", f"model.name_or_path={tiny_bert}", "--set", f"data.train_paths={corpus_file}",
        "--set", "optim.max_steps=3", "--set", "optim.batch_size=8", "--set", "scaling.cpus_per_worker=1",
        "--set", f"checkpoint.storage_path={tmp_path / 'runs'}", "--set", f"tracking.tracking_uri={mlflow_uri}",
        "--set", "tracking.experiment=jobs", "--set", "objective.pseudo_perplexity_sentences=0",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "succeeded" in done.stdout.lower()
    assert "[lmp] model saved to" in done.stdout
    client = MlflowClient(mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("jobs").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert any((tmp_path / "runs").glob("mlm-*/model/config.json"))


def test_bad_config_fails_the_job_before_any_worker(head_node: str) -> None:
    env = _env()
    command = [
        RAY, "job", "submit", "--address", head_node, "--working-dir", str(REPO),
        "--runtime-env", str(REPO / "ray_jobs/runtime_env.yaml"), "--",
        "python", "ray_jobs/train.py", "--config", "configs/mlm.yaml", "--set", "model.pooling=avg",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "model.pooling" in done.stdout and "'mean', 'cls' or 'max'" in done.stdout
    assert "RayTrainWorker" not in done.stdout
