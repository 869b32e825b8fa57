"""A training stage's reports as they happened, kept beside the stage so that a reused stage can send them again."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray.train import UserCallback


class ReportLog(UserCallback):
    """Appends the numbers of each report of rank 0 to a JSON-lines file (written by Ray Train's controller,
    so the path must be on storage it reaches: the pipeline's folder)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        row = {k: v for k, v in metrics[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")


def read_reports(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
