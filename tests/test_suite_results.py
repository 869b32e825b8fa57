"""`make test-results`: the plugin writes the counts pytest reports and the seconds, with the machine."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.suite_results import heaviest_files_first

REPO = Path(__file__).resolve().parents[1]


def run_pytest(folder: Path, test_file: str, *options: str) -> subprocess.CompletedProcess:
    """pytest on one file of `folder`, in a fresh process with the plugin loaded as `make test-results` loads it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.suite_results",
                           *options, "--rootdir", str(folder), str(folder / test_file)],
                          cwd=folder, env=env, capture_output=True, text=True)


def test_suite_results_file_holds_counts_seconds_and_machine(tmp_path: Path) -> None:
    (tmp_path / "test_three.py").write_text(
        "import time, pytest\n"
        "def test_passes():\n    time.sleep(0.2)\n"
        "def test_fails():\n    assert False\n"
        "@pytest.mark.skip(reason='shown skipped')\ndef test_skipped():\n    pass\n")
    out = tmp_path / "results" / "test_suite.json"
    done = run_pytest(tmp_path, "test_three.py", "--suite-results", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["counts"] == {"passed": 1, "failed": 1, "skipped": 1, "error": 0, "xfailed": 0, "xpassed": 0}
    assert result["exit_status"] == 1 and result["seconds"] > 0
    assert list(result["file_seconds"]) == ["test_three.py"]
    assert 0.2 <= result["file_seconds"]["test_three.py"] <= result["seconds"]
    assert result["machine"]["cpus"] == os.cpu_count() and len(result["machine"]["load_average"]) == 3
    assert "1 failed, 1 passed, 1 skipped" in done.stdout


def test_without_the_option_no_file_is_written(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_passes():\n    assert True\n")
    done = run_pytest(tmp_path, "test_one.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "suite results" not in done.stdout and list(tmp_path.rglob("*.json")) == []


def test_files_go_out_heaviest_first_new_ones_before_all_and_each_keeps_its_order() -> None:
    nodeids = ["a.py::one", "a.py::two", "b.py::one", "new.py::one", "c.py::one", "c.py::two[1]", "c.py::two[2]"]
    assert heaviest_files_first(nodeids, {"a.py": 5.0, "b.py": 0.1, "c.py": 40.0}) == [
        "new.py::one", "c.py::one", "c.py::two[1]", "c.py::two[2]", "a.py::one", "a.py::two", "b.py::one"]
    assert heaviest_files_first(nodeids, {}) == nodeids
