"""Serve's per-request access log lines, and its tracebacks of refused requests, go to the replicas' log files, not
to the console.

Every Serve replica logs one line per call (`POST /v1/search 200 12ms`, `CALL search OK 4ms`) to its
file under the session's logs/serve/ and to stderr, which Ray forwards to the driver's console: a few
requests fill a screen, and under load they are most of what a terminal shows. `keep_access_log_off_console`,
called first in each deployment's constructor, filters those lines (records Serve marks
`serve_access_log`) from the replica's console handler only; the file keeps them, and every other
line (loads, warnings, errors) still reaches the console. `lmp serve run --verbose` sets
`ACCESS_LOG_ENV=1`, which leaves the console as Serve has it.

Serve also logs "Request failed." with a traceback, at ERROR, for every exception a deployment method raises, and a
deployment refuses a request by raising (a `deployments.Refusal`, whose class says `refusal = True`: the ingress
answers it with a 4xx or 503 that names why). Those tracebacks are answers, not failures: the filter
keeps them off the console too, and the file keeps them.
"""
from __future__ import annotations

import logging
import os

ACCESS_LOG_ENV = "LMP_SERVE_ACCESS_LOG_TO_CONSOLE"
SERVE_LOGGER = "ray.serve"


def _console_line(record: logging.LogRecord) -> bool:
    """Neither an access line nor Serve's traceback of a refused request."""
    refused = record.exc_info is not None and getattr(record.exc_info[1], "refusal", False)
    return not (getattr(record, "serve_access_log", False) or refused)


def keep_access_log_off_console() -> None:
    """In this replica: no access lines or refusals' tracebacks on the console handlers of Serve's logger (unless
    ACCESS_LOG_ENV=1)."""
    if os.environ.get(ACCESS_LOG_ENV) == "1":
        return
    for handler in logging.getLogger(SERVE_LOGGER).handlers:
        # The console handler is a plain StreamHandler; the file is written through a MemoryHandler.
        if type(handler) is logging.StreamHandler and _console_line not in handler.filters:
            handler.addFilter(_console_line)
