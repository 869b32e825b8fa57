"""Access lines and refusals' tracebacks leave the console handler of Serve's logger and nothing else does, without
Ray."""
from __future__ import annotations

import io
import logging
from typing import Iterator

import pytest

from lmplatform.serving.access_log import ACCESS_LOG_ENV, SERVE_LOGGER, keep_access_log_off_console
from lmplatform.serving.deployments import NotAvailable, NotCaughtUp  # imports Ray Serve, which sets up its logger


@pytest.fixture
def serve_logger() -> Iterator[tuple[logging.Logger, io.StringIO, logging.handlers.MemoryHandler]]:
    """Serve's replica logger as Serve sets it up: a console StreamHandler and a MemoryHandler in front of the file."""
    import logging.handlers

    logger = logging.getLogger(SERVE_LOGGER)
    saved = (list(logger.handlers), logger.propagate, logger.level)
    console = io.StringIO()
    file = logging.handlers.MemoryHandler(capacity=100)
    logger.handlers = [logging.StreamHandler(console), file]
    logger.propagate, logger.level = False, logging.INFO
    yield logger, console, file
    logger.handlers, logger.propagate, logger.level = saved


def _log_both(logger: logging.Logger) -> None:
    logger.info("POST /v1/search 200 12.0ms", extra={"serve_access_log": True})
    logger.info("retriever: loaded release m/2 in 1.2s")


def test_access_lines_go_to_the_file_only(serve_logger, monkeypatch) -> None:
    logger, console, file = serve_logger
    monkeypatch.delenv(ACCESS_LOG_ENV, raising=False)
    keep_access_log_off_console()
    keep_access_log_off_console()  # a second replica start in the process adds no second filter
    _log_both(logger)
    assert console.getvalue() == "retriever: loaded release m/2 in 1.2s\n"
    assert [r.getMessage() for r in file.buffer] == ["POST /v1/search 200 12.0ms", "retriever: loaded release m/2 in 1.2s"]
    assert len(logger.handlers[0].filters) == 1


def test_verbose_keeps_them_on_the_console(serve_logger, monkeypatch) -> None:
    logger, console, _ = serve_logger
    monkeypatch.setenv(ACCESS_LOG_ENV, "1")
    keep_access_log_off_console()
    _log_both(logger)
    assert "POST /v1/search 200" in console.getvalue() and "loaded release" in console.getvalue()


def test_a_refused_requests_traceback_goes_to_the_file_only(serve_logger, monkeypatch) -> None:
    """Serve logs "Request failed." with the traceback of whatever a deployment method raised; a refusal (answered as
    a 4xx or 503) stays off the console, a real failure does not."""
    logger, console, file = serve_logger
    monkeypatch.delenv(ACCESS_LOG_ENV, raising=False)
    keep_access_log_off_console()
    for exc in (NotAvailable("no labels"), NotCaughtUp("seq 9 not yet applied", 503), RuntimeError("index corrupt")):
        try:
            raise exc
        except Exception:
            logger.exception("Request failed.")
    assert console.getvalue().count("Request failed.") == 1 and "RuntimeError: index corrupt" in console.getvalue()
    assert "no labels" not in console.getvalue() and "seq 9" not in console.getvalue()
    assert len(file.buffer) == 3
