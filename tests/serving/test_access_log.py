"""Access lines leave the console handler of Serve's logger and nothing else does, without Ray."""
from __future__ import annotations

import io
import logging
from typing import Iterator

import pytest

from lmplatform.serving.access_log import ACCESS_LOG_ENV, SERVE_LOGGER, keep_access_log_off_console


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
