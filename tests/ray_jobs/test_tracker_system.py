"""ray_jobs/tracker_system.py as a job runs it: the library a copy elsewhere (py_modules), the working directory not
the repository, so the recipe and the Serve config are the ones beside the script; every input is checked before
the import, a bad one named with nothing written. Its --help and the missing-dependency messages:
test_entry_points.py (every entry point). The job itself, end to end, trains: not run here."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.pipeline.test_tracker_system import tracker_export

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "ray_jobs" / "tracker_system.py")


@pytest.fixture(scope="module")
def library_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lmplatform as a job's py_modules copy, outside the repository."""
    copy = tmp_path_factory.mktemp("py_modules_files") / "_ray_pkg_0"
    shutil.copytree(REPO / "src" / "platform" / "lmplatform", copy / "lmplatform",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _job(python: Path, library: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    return subprocess.run([str(python), SCRIPT, *args], cwd=cwd, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(library), "LMP_HOME": str(cwd)})


def test_the_job_finds_the_recipe_and_serve_config_beside_it(python_without_lmplatform: Path, library_copy: Path,
                                                              tmp_path: Path) -> None:
    tracker_export(tmp_path / "export.json")
    done = _job(python_without_lmplatform, library_copy, tmp_path, "--format", "jira-json", "--input", "export.json",
                "--name", "acme", "--check")
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout[done.stdout.index("\n{") + 1:])
    assert plan["pipeline"]["base_dir"] == str(REPO / "configs" / "pipelines")
    assert plan["serve"]["config"] == str(REPO / "serve" / "config.yaml")
    assert plan["import"]["out"] == str(tmp_path / "runs" / "data" / "acme")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json"]


def test_help_names_the_steps_options(python_without_lmplatform: Path, library_copy: Path, tmp_path: Path) -> None:
    done = _job(python_without_lmplatform, library_copy, tmp_path, "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Usage: ray_jobs/tracker_system.py pipeline tracker [OPTIONS]" in done.stdout
    for option in ("--format", "--input", "--name", "--set", "--serve-set", "--no-serve", "--detach", "--check"):
        assert option in done.stdout


@pytest.mark.parametrize("args, named", [
    (["--format", "redmine", "--input", "export.json"], "import.format"),
    (["--format", "jira-json", "--input", "other.json"], "import.inputs: data file not found: other.json"),
    (["--format", "jira-json", "--input", "export.json", "--set", "stages.biencoder.run.optim.lr=fast"], "optim.lr"),
    (["--format", "jira-json", "--input", "export.json", "--set", "stages.tune.x=1"], "no stage named 'tune'"),
], ids=["format", "input", "set", "stage"])
def test_a_bad_input_fails_naming_it_before_the_import(python_without_lmplatform: Path, library_copy: Path,
                                                       tmp_path: Path, args: list[str], named: str) -> None:
    tracker_export(tmp_path / "export.json")
    done = _job(python_without_lmplatform, library_copy, tmp_path, *args, "--name", "acme")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert named in done.stderr, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json"]  # no runs/, no mlruns/
