"""Serve's per-request access log lines go to the replicas' log files, not to the console.

Every Serve replica logs one line per call (`POST /v1/search 200 12ms`, `CALL search OK 4ms`) to its
file under the session's logs/serve/ and to stderr, which Ray forwards to the driver's console: a few
requests fill a screen, and under load they are most of what a terminal shows. `keep_access_log_off_console`,
called first in each deployment's constructor, filters those lines (records Serve marks
`serve_access_log`) from the replica's console handler only; the file keeps them, and every other
line (loads, warnings, errors) still reaches the console. `lmp serve run --verbose` sets
`ACCESS_LOG_ENV=1`, which leaves the console as Serve has it.
"""
from __future__ import annotations

import logging
import os

ACCESS_LOG_ENV = "LMP_SERVE_ACCESS_LOG_TO_CONSOLE"
SERVE_LOGGER = "ray.serve"


def _not_an_access_line(record: logging.LogRecord) -> bool:
    return not getattr(record, "serve_access_log", False)


def keep_access_log_off_console() -> None:
    """In this replica: no access lines on the console handlers of Serve's logger (unless ACCESS_LOG_ENV=1)."""
    if os.environ.get(ACCESS_LOG_ENV) == "1":
        return
    for handler in logging.getLogger(SERVE_LOGGER).handlers:
        # The console handler is a plain StreamHandler; the file is written through a MemoryHandler.
        if type(handler) is logging.StreamHandler and _not_an_access_line not in handler.filters:
            handler.addFilter(_not_an_access_line)
