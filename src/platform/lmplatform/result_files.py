"""Result files of measured runs (the demo, the test suite): JSON with the machine they ran on.

docs/benchmarks.md cites their fields; the load averages say whether the machine was idle, which a timing needs.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

__all__ = ["portable", "write_result_file"]  # what tools may use (lazy_exports.py)


def machine() -> dict[str, Any]:
    """What a timing depends on: cores, Python, date, and the load average (1, 5, 15 minutes) when asked."""
    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def portable(value: Any, root: Path) -> Any:
    """`value` with the paths under `root` made relative to it (`../shared/...` for the data beside it), so that a
    result file names no folder of the machine it was measured on."""
    if isinstance(value, dict):
        return {key: portable(item, root) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item, root) for item in value]
    if isinstance(value, str):
        return value.replace(f"{root.parent}/shared/", "../shared/").replace(f"{root}/", "")
    return value


def write_result_file(path: Path, payload: dict[str, Any], root: Path | None = None) -> Path:
    """`payload` under a `machine` block as written at the end of the run, in `path` (folders created); paths under
    `root` (the working folder: the repository, for `make`) written relative to it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = portable({"machine": machine(), **payload}, (root or Path.cwd()).resolve())
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
