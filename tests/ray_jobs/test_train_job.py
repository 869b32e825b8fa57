"""`ray job submit` to a head started the way the README says: `.venv/bin/ray start`, no activated venv.

The commands are the README's own ("Submitting to a Ray cluster"), read from README.md and run
by bash from the repository root, in the environment of a new user's shell: PATH without the
venv's bin folder, VIRTUAL_ENV and every RAY_* variable unset. The README's `export` line is
what sets the Ray variables. The test adds only what sharing this machine needs (its own temp
dir and ports, `--block` so that it owns the head's processes; the dashboard address replaced
accordingly) and, to the job, --set overrides for a tiny model, 3 steps and stores in tmp.

The first `python` on that PATH is one with only the standard library (the head's jobs on
a machine whose system Python has no dependencies get such a one, when the head was started without the venv), made
deterministic here: see conftest.py. So the README's sequence is shown to work where a plain
`python` entrypoint cannot, and the plain one is shown to fail with a message saying what to do.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from lmplatform.testing.local_cluster import free_port
from tests.conftest import new_mlflow_store

REPO = Path(__file__).resolve().parents[2]
README_ADDRESS = "--address http://127.0.0.1:8265"


def readme_job_commands() -> dict[str, str]:
    """The README's job sequence: its export, `ray start` and `ray job submit` commands, verbatim."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    # The section's first code block.
    block = text.split("### Submitting to a Ray cluster\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands, current = [], ""
    for line in block.splitlines():
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip() + " "
            continue
        if current and not current.startswith("#"):
            commands.append(current)
        current = ""
    kinds = {"export": "export ", "start": ".venv/bin/ray start ", "submit": ".venv/bin/ray job submit "}
    found = {kind: [c for c in commands if c.startswith(prefix)] for kind, prefix in kinds.items()}
    assert all(len(v) == 1 for v in found.values()) and len(commands) == 3, (
        f"the README's job block should be one export, one `.venv/bin/ray start` and one "
        f"`.venv/bin/ray job submit`; found {commands}")
    assert README_ADDRESS in found["submit"][0], f"the README's submit line no longer has {README_ADDRESS}"
    return {kind: v[0] for kind, v in found.items()}


def new_user_env(first_on_path: Path) -> dict[str, str]:
    """A shell as a new user opens it: no venv on PATH, no VIRTUAL_ENV, no Ray variables."""
    venv_bin = Path(sys.executable).parent.resolve()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RAY_") and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MLFLOW_TRACKING_URI")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != venv_bin]
    env["PATH"] = os.pathsep.join([str(first_on_path), *path])
    assert shutil.which("python", path=env["PATH"]) == str(first_on_path / "python")
    return env


@dataclass
class Head:
    process: subprocess.Popen
    temp_dir: Path
    dashboard_url: str
    gcs_port: int
    env: dict[str, str]

    def submit(self, submit_command: str, *extra: str) -> subprocess.CompletedProcess:
        """Run a `ray job submit` command line from the repository root, as the README does."""
        command = submit_command.replace(README_ADDRESS, f"--address {self.dashboard_url}")
        script = "\n".join([readme_job_commands()["export"], " ".join([command, *map(shlex.quote, extra)])])
        return subprocess.run(["bash", "-c", script], cwd=REPO, env=self.env, capture_output=True, text=True)

    def log_tail(self) -> str:
        return (self.temp_dir / "head.log").read_text(errors="replace")[-3000:]

    def processes(self) -> list[int]:
        """Every process of this head: `ray start`'s descendants (Ray's daemons, their workers, job
        drivers), plus any whose command line names its temp dir or GCS port (one re-parented early)."""
        children: dict[int, list[int]] = {}
        markers = (str(self.temp_dir).encode(), f"127.0.0.1:{self.gcs_port}".encode())
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (entry / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
            if any(marker in cmdline for marker in markers):
                found.add(int(entry.name))
        todo = [self.process.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.add(child)
                todo.append(child)
        return sorted(found)

    def stop(self) -> None:
        """SIGKILL this head's processes, all collected first (a dead parent's children are re-parented).

        Not `ray stop`, which stops every Ray on the machine; not a graceful SIGTERM of `ray start
        --block` either, which took 10-40 s here for nothing a test needs.
        """
        for pid in [*self.processes(), self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        deadline = time.time() + 30  # a safety net, not a timing assertion
        while self.processes() and time.time() < deadline:
            time.sleep(0.2)


def _wait_until_jobs_are_accepted(head: Head, deadline: float) -> None:
    """The dashboard answers before the node's job agent does; submit a no-op job until one is accepted."""
    from ray.job_submission import JobSubmissionClient

    while True:
        if head.process.poll() is not None:
            raise RuntimeError(f"`ray start` exited ({head.process.returncode}):\n{head.log_tail()}")
        try:
            JobSubmissionClient(head.dashboard_url).submit_job(entrypoint="true")
            return
        except (ConnectionError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and "No available agent" not in str(exc):
                raise
            # A safety net, not a timing assertion: on a loaded 2-core machine the job agent took over 2 minutes.
            if time.time() > deadline:
                raise RuntimeError(f"the head accepted no job: {exc}\n{head.log_tail()}") from exc
            time.sleep(1)


@pytest.fixture(scope="module")
def readme_head(python_without_dependencies: Path) -> Iterator[Head]:
    """The README's `ray start`, in this module's own temp dir and ports, stopped by PID (never `ray stop`)."""
    commands = readme_job_commands()
    # Short: Ray's unix sockets live under it and paths are limited to 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="lmp-job-", dir="/tmp"))
    gcs_port, dashboard_port = free_port(), free_port()
    own = ["--temp-dir", str(temp_dir), "--port", str(gcs_port), "--dashboard-port", str(dashboard_port),
           "--dashboard-agent-listen-port", str(free_port()), "--ray-client-server-port", str(free_port()),
           "--object-store-memory", str(150 * 1024 * 1024), "--disable-usage-stats", "--block"]
    env = new_user_env(python_without_dependencies)
    script = "\n".join([commands["export"], "exec " + " ".join([commands["start"], *map(shlex.quote, own)])])
    with (temp_dir / "head.log").open("ab") as log:
        process = subprocess.Popen(["bash", "-c", script], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    head = Head(process, temp_dir, f"http://127.0.0.1:{dashboard_port}", gcs_port, env)
    try:
        _wait_until_jobs_are_accepted(head, time.time() + 300)
        yield head
    finally:
        head.stop()
        leftover = head.processes()
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not leftover, f"processes of the test head outlived it: {leftover}"


def _job_output(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def _library_location(output: str) -> str:
    """Where the job's driver imported lmplatform from (the entry point's first log line)."""
    found = re.search(r"\[lmp\] ray_jobs/\w+\.py: .*, lmplatform \S+ from (\S+)", output)
    assert found, f"no '[lmp] ... lmplatform ... from' line in the job's output:\n{output[-3000:]}"
    return found.group(1)


def test_the_readmes_job_sequence_reaches_mlflow(readme_head: Head, tiny_bert: Path, corpus_file: Path,
                                                 mlflow_template: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    mlflow_uri = new_mlflow_store(mlflow_template, tmp_path)
    done = readme_head.submit(
        readme_job_commands()["submit"],
        # After the README's own --set values, so these win: a tiny model, 3 steps, stores in tmp.
        "--set", f"model.name_or_path={tiny_bert}", "--set", f"data.train_paths={corpus_file}",
        "--set", "optim.max_steps=3", "--set", "optim.batch_size=8", "--set", "scaling.cpus_per_worker=1",
        "--set", f"checkpoint.storage_path={tmp_path / 'runs'}", "--set", f"tracking.tracking_uri={mlflow_uri}",
        "--set", "tracking.experiment=jobs", "--set", "objective.pseudo_perplexity_sentences=0",
    )
    output = _job_output(done)
    assert done.returncode == 0, output[-6000:]
    assert "succeeded" in done.stdout.lower()
    assert "[lmp] model saved to" in output
    # The driver ran the library shipped with the job (runtime_env.yaml's py_modules), not the
    # editable install its interpreter also sees: py_modules come first on the PYTHONPATH.
    assert "/runtime_resources/py_modules_files/" in _library_location(output)
    # runtime_env.yaml's setup hook keeps Train's State API lookups on this head while other Rays
    # run on the machine (the test session's, other users').
    assert "Found multiple active Ray instances" not in output
    client = MlflowClient(mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("jobs").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.metrics, "the run has no metrics"
    assert any((tmp_path / "runs").glob("mlm-*/model/config.json"))


def test_a_plain_python_entrypoint_fails_with_what_to_do(readme_head: Head, python_without_dependencies: Path) -> None:
    """A plain `python` entrypoint: `python` is the head's, which lacks the dependencies; py_modules cannot help."""
    submit = readme_job_commands()["submit"]
    plain = submit.replace('"$PWD/.venv/bin/python" ', "python ")
    assert plain != submit
    done = readme_head.submit(plain)
    output = _job_output(done)
    assert done.returncode != 0
    assert "ModuleNotFoundError" not in output and "Traceback" not in output
    assert f"cannot run in {sys.base_exec_prefix}" in output  # names the interpreter that ran
    assert "does not have lmplatform's dependencies" in output
    assert '"$PWD/.venv/bin/python" ray_jobs/train.py ...' in output


def test_the_job_brings_the_library_to_a_python_that_has_only_the_dependencies(
        readme_head: Head, python_without_lmplatform: Path) -> None:
    """A node's Python with torch and Ray but no lmplatform imports it from the job (py_modules).

    A bad config ends the job in the driver before any worker starts, so this costs seconds.
    """
    submit = readme_job_commands()["submit"]
    done = readme_head.submit(submit.replace('"$PWD/.venv/bin/python"', shlex.quote(str(python_without_lmplatform))),
                              "--set", "model.pooling=avg")
    output = _job_output(done)
    assert done.returncode != 0
    assert "/runtime_resources/py_modules_files/" in _library_location(output)
    assert "model.pooling" in output and "'mean', 'cls' or 'max'" in output
    assert "RayTrainWorker" not in output
