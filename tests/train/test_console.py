"""What Ray prints around a training run: Ray Data's INFO lines and its progress-bar notice stay off the console."""
from __future__ import annotations

import logging
import logging.config

import yaml

from lmplatform.ray_runtime import RAY_DATA_LOGGING, RayDataConsoleFilter


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("ray.data", level, __file__, 1, message, None, None)


def test_ray_data_console_shows_warnings_but_not_its_info_or_the_progress_bar_notice() -> None:
    from ray.data._internal.logging import configure_logging

    config = yaml.safe_load(RAY_DATA_LOGGING.read_text())
    logger = logging.getLogger("ray.data")
    try:
        logging.config.dictConfig(config)  # as Ray Data applies RAY_DATA_LOGGING_CONFIG in each process
        (console,) = [h for h in logger.handlers if h.get_name() == "console"]
        assert console.level == logging.WARNING
        shown = [r.getMessage() for r in (
            _record(logging.INFO, "Starting execution of Dataset validation_0"),
            _record(logging.WARNING, "Progress bars disabled. To enable, set ..."),
            _record(logging.WARNING, "Dataset has 1 block, fewer than the 2 requested"),
        ) if r.levelno >= console.level and console.filter(r)]
        assert shown == ["Dataset has 1 block, fewer than the 2 requested"]
        assert {h.get_name() for h in logger.handlers} == {"file", "console"}  # the file keeps every level
    finally:
        configure_logging()  # Ray Data's own configuration for the rest of the session
    assert not RayDataConsoleFilter().filter(_record(logging.WARNING, "Progress bars disabled."))
