"""Interpreters a job's `python` can turn out to be, made from real ones.

- `python_without_dependencies`: the base interpreter this venv was made from, run with `-S`
  (no site-packages): only the standard library, like the system Python a head started
  without the activated venv hands its jobs on a machine whose system Python lacks the dependencies.
  Made with -S so that the tests do not depend on what this machine's system Python happens to have installed.
- `python_without_lmplatform`: the venv's interpreter with its site-packages on PYTHONPATH but
  run with `-S`, so no .pth file is processed: every dependency is importable, the editable
  install of lmplatform (a .pth file) is not. A node's Python that has the dependencies only.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _write_launcher(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def base_interpreter() -> Path:
    """The interpreter the venv was created from (its `home`), not the venv's own."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (Path(sys.base_exec_prefix) / "bin" / version, Path(sys.base_exec_prefix) / "bin" / "python3"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no base interpreter under {sys.base_exec_prefix}/bin")


@pytest.fixture(scope="session")
def python_without_dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose `python` has only the standard library (put it first on a PATH)."""
    folder = tmp_path_factory.mktemp("bare-python") / "bin"
    python = _write_launcher(folder / "python", f'exec "{base_interpreter()}" -S "$@"')
    probe = subprocess.run([str(python), "-c", "import ray"], capture_output=True, text=True)
    assert probe.returncode != 0, "the bare interpreter can import ray: the tests below would prove nothing"
    return folder


@pytest.fixture(scope="session")
def python_without_lmplatform(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter that imports torch, Ray and the rest but not lmplatform."""
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    site = os.pathsep.join(paths)
    # Appended: Ray puts the job's py_modules and working dir first on PYTHONPATH.
    python = _write_launcher(tmp_path_factory.mktemp("deps-python") / "python",
                             f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec "{sys.executable}" -S "$@"')
    # Found, not imported: importing torch alone takes seconds.
    probe = subprocess.run([str(python), "-c", "import importlib.util as u\n"
                            "print([m for m in ('ray', 'torch', 'transformers', 'mlflow', 'lmplatform') if u.find_spec(m)])"],
                           capture_output=True, text=True, cwd="/", env={k: v for k, v in os.environ.items()
                                                                          if k != "PYTHONPATH"})
    assert probe.stdout.strip() == "['ray', 'torch', 'transformers', 'mlflow']", probe.stdout + probe.stderr[-2000:]
    return python
