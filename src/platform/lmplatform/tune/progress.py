"""What a running study prints: one line when a trial changes state or reports, nothing in between.

Ray's CLIReporter reprints its whole trial table every few seconds whether anything happened or not
(hundreds of lines for a study of minutes); the end of a study prints one table of its own
(`report.print_summary`). This reporter is Tune's legacy `ProgressReporter` interface: Tune asks
`should_report` on every loop turn, so it only compares each trial's status and report count with
what it printed last.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ray.tune import ProgressReporter


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class TrialStatusLines(ProgressReporter):
    """Prints `[tune] <trial> <STATUS> ...` and `[tune] <trial> report <n>: ...` lines, each once."""

    def __init__(self, metrics: Sequence[str], parameters: Sequence[str], write: Optional[Callable[[str], None]] = None):
        # `write` None means print, looked up when a line is written: Tune pickles the reporter with its
        # run config, and Ray Train replaces builtins.print in the driver, which a stored print would fail.
        self.metrics, self.parameters, self.write = list(metrics), list(parameters), write
        self.metric: Optional[str] = None
        self.mode: Optional[str] = None
        self._printed: dict[str, tuple[str, int]] = {}  # trial id -> (status, reports) last printed
        self._pending: list[str] = []

    def setup(self, start_time: Optional[float] = None, total_samples: Optional[int] = None,
              metric: Optional[str] = None, mode: Optional[str] = None, **kwargs: Any) -> None:
        self.metric, self.mode = metric, mode

    def _values(self, result: dict[str, Any]) -> str:
        return ", ".join(f"{m}={_fmt(result[m])}" for m in self.metrics if m in result)

    def _changes(self, trials: Sequence[Any]) -> list[str]:
        lines = []
        for trial in trials:
            result = trial.last_result or {}
            reports = int(result.get("training_iteration", 0) or 0)
            status = str(trial.status)
            last_status, last_reports = self._printed.get(trial.trial_id, ("", 0))
            if reports > last_reports and status == last_status:
                lines.append(f"[tune] {trial.trial_id} report {reports}: {self._values(result)}")
            if status != last_status:
                if not last_status:  # first seen: what it tries
                    config = trial.config or {}
                    detail = ", ".join(f"{p}={_fmt(config[p])}" for p in self.parameters if p in config)
                elif status == "ERROR":
                    detail = f"after {reports} report(s); see {getattr(trial, 'path', '') or 'the trial folder'}"
                else:
                    detail = f"after {reports} report(s): {self._values(result)}" if reports else ""
                lines.append(f"[tune] {trial.trial_id} {status} {detail}".rstrip())
            self._printed[trial.trial_id] = (status, reports)
        return lines

    def should_report(self, trials: list, done: bool = False) -> bool:
        self._pending += self._changes(trials)
        return bool(self._pending)

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        for line in self._pending:
            if self.write is None:
                print(line, flush=True)
            else:
                self.write(line)
        self._pending.clear()
