"""`ray job submit` of ray_jobs/train.py against a real head node on 127.0.0.1."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_job_agent(url: str, deadline: float) -> None:
    """The dashboard answers before the head's job agent does; submit a no-op job until one is accepted."""
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
def head_node() -> Iterator[str]:
    """A `ray start --head --block` we own: stopping it stops only its own processes."""
    temp_dir = tempfile.mkdtemp(prefix="lmpray", dir="/tmp")  # short: socket paths have a length limit
    dashboard = _free_port()
    env = _env()
    process = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={_free_port()}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
         # The job agent's HTTP port defaults to 52365, which another Ray on the machine may hold.
         f"--dashboard-agent-listen-port={_free_port()}",
         f"--temp-dir={temp_dir}", "--disable-usage-stats"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{dashboard}"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/version", timeout=2)
            break
        except OSError:
            if time.time() > deadline or process.poll() is not None:
                os.killpg(process.pid, signal.SIGKILL)
                pytest.fail("the Ray head node did not start")
            time.sleep(1)
    _wait_for_job_agent(url, deadline)
    try:
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        _kill_leftovers(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _kill_leftovers(temp_dir: str) -> None:
    """Ray daemons can outlive `ray start --block`; every process of ours names our temp dir."""
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(temp_dir in part for part in proc.info["cmdline"] or ()):
            try:
                proc.kill()
            except psutil.Error:
                pass


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
