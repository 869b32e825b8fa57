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


def machine() -> dict[str, Any]:
    """What a timing depends on: cores, Python, date, and the load average (1, 5, 15 minutes) when asked."""
    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def write_result_file(path: Path, payload: dict[str, Any]) -> Path:
    """`payload` under a `machine` block as written at the end of the run, in `path` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
