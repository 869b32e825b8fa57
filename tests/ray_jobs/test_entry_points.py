"""Every ray_jobs/ entry point says what to do when its Python lacks lmplatform or its dependencies.

Run directly here (milliseconds each); tests/ray_jobs/test_train_job.py checks the same message
through a real `ray job submit`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINTS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "ray_jobs").glob("*.py")
                      if not p.name.startswith("_"))


def _run(python: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_JOB_CONFIG_JSON_ENV_VAR")}
    return subprocess.run([str(python), script, "--help"], cwd=REPO, env={**clean, **env},
                          capture_output=True, text=True)


def test_every_entry_point_is_covered() -> None:
    assert {"ray_jobs/train.py", "ray_jobs/pipeline.py", "ray_jobs/tune.py", "ray_jobs/serve.py",
            "ray_jobs/tracker_system.py"} <= set(ENTRY_POINTS)


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_a_python_without_the_dependencies_is_told_which_interpreter_to_use(
        script: str, python_without_dependencies: Path) -> None:
    done = _run(python_without_dependencies / "python", script)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr  # a message, not a stack
    assert f"{script} cannot run in " in done.stderr
    assert "does not have lmplatform's dependencies (missing: ray, torch" in done.stderr
    assert f".venv/bin/python {script} ..." in done.stderr


def test_under_ray_job_submit_the_message_names_the_head_and_the_entrypoint_to_use(
        python_without_dependencies: Path) -> None:
    # The variable Ray's job supervisor sets in every entrypoint's environment.
    done = _run(python_without_dependencies / "python", "ray_jobs/train.py", RAY_JOB_CONFIG_JSON_ENV_VAR="{}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the first one on the PATH of the process that\nstarted the Ray head" in done.stderr
    assert '-- "$PWD/.venv/bin/python" ray_jobs/train.py ...' in done.stderr
    assert "source .venv/bin/activate" in done.stderr


@pytest.mark.parametrize("under_job", [False, True], ids=["direct", "ray-job"])
def test_a_python_with_the_dependencies_but_not_the_library_is_told_how_to_get_it(
        python_without_lmplatform: Path, under_job: bool) -> None:
    env = {"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"} if under_job else {}
    done = _run(python_without_lmplatform, "ray_jobs/train.py", **env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "cannot import lmplatform" in done.stderr and "the dependencies are there, the library is not" in done.stderr
    if under_job:
        assert "--runtime-env ray_jobs/runtime_env.yaml" in done.stderr and "py_modules" in done.stderr
    else:
        assert "-m pip install -e ." in done.stderr


def test_with_the_library_importable_the_entry_point_runs(python_without_lmplatform: Path) -> None:
    # What py_modules does for a job: the library's folder first on PYTHONPATH.
    done = _run(python_without_lmplatform, "ray_jobs/train.py", PYTHONPATH=str(REPO / "src" / "platform"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--config" in done.stdout


def test_serve_finds_the_projects_config_when_the_library_is_a_copy_elsewhere(
        python_without_lmplatform: Path, tmp_path: Path) -> None:
    """In a submitted job lmplatform is Ray's py_modules copy, outside the working dir, so a default
    found relative to the library's files misses serve/config.yaml; ray_jobs/serve.py names it."""
    copy = tmp_path / "py_modules_files" / "_ray_pkg_0"
    shutil.copytree(REPO / "src" / "platform" / "lmplatform", copy / "lmplatform",
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([str(python_without_lmplatform), "ray_jobs/serve.py", "--set", "limits.max_k=0"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(copy)}, capture_output=True, text=True)
    output = done.stdout + done.stderr
    assert "serve config not found" not in output
    # Read and validated: the override is refused by name, before any model or Ray is needed.
    assert done.returncode != 0 and "limits.max_k" in output, output[-3000:]
