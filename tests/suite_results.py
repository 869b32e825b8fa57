"""A pytest plugin for `make test-results`: the suite's counts and seconds as a result file.

    python -m pytest -p tests.suite_results --suite-results bench/results/test_suite.json

The file holds what docs/benchmarks.md cites for the suite (tests passed, skipped, failed, seconds) and the
machine, with its load average at the end: a suite timed on a busy machine says so. It also holds each test file's
seconds (setup, call and teardown of its tests), which tests/conftest.py reads to hand out the heaviest files first.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import pytest

OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")
STARTED = pytest.StashKey[float]()
FILE_SECONDS: Counter[str] = Counter()  # this process's runs: one pytest session


def heaviest_files_first(nodeids: list[str], file_seconds: dict[str, float]) -> list[str]:
    """`nodeids` with their files in the order two pytest-xdist processes should take them: the heaviest first (the
    last file handed out then ends near the other process's last), files missing from `file_seconds` before all (a
    new file may be heavy), and each file's tests in their own order."""
    return sorted(nodeids, key=lambda nodeid: -file_seconds.get(nodeid.split("::")[0], float("inf")))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-results", metavar="PATH", default=None,
                     help="Write the session's counts and seconds, with the machine, to this JSON file.")


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[STARTED] = time.perf_counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under pytest-xdist the controller's hook gets every worker's reports too.
    FILE_SECONDS[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    path = config.getoption("suite_results")
    if not path:
        return
    from lmplatform.result_files import write_result_file

    counts = {outcome: len(terminalreporter.stats.get(outcome, [])) for outcome in OUTCOMES}  # as pytest's summary line
    seconds = time.perf_counter() - config.stash[STARTED]
    written = write_result_file(Path(path), {"command": " ".join(["pytest", *sys.argv[1:]]), "exit_status": int(exitstatus),
                                             "counts": counts, "seconds": round(seconds, 1),
                                             "file_seconds": {name: round(spent, 1)
                                                              for name, spent in FILE_SECONDS.most_common()}})
    terminalreporter.write_line(f"suite results: {written}")
