"""The serving tests' Ray workers export their metrics every 2 s."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_worker_env() -> dict[str, str]:
    """A Ray process exports its metrics every 10 s by default, and a test that scrapes a count the service has just
    made (tests/serving/scrape.py) waits for that export: up to 10 s a wait. The job's workers (its Serve replicas
    among them) export every 2 s here (Ray's floor is 1 s); the rest of the suite's workers keep Ray's default."""
    return {"RAY_metrics_report_interval_ms": "2000"}
