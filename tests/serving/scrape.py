"""Reading the service's Prometheus metrics as a scraper does: every node's metrics export port, /metrics."""
from __future__ import annotations

import time

import httpx


def scrape() -> str:
    """Every live node's Prometheus endpoint, as a scraper reads it (the metrics export port, /metrics)."""
    from lmplatform.serving.metrics import scrape_urls

    urls = scrape_urls()
    assert urls and all(url.startswith("http://127.0.0.1:") for url in urls), urls
    return "\n".join(httpx.get(url, timeout=30).text for url in urls)


def samples(page: str, name: str, **labels: str) -> list[float]:
    """Values of the samples `name` (Ray's `ray_` prefix added) whose labels include `labels`.

    Only the page's lines of that sample name are parsed: a whole page (every Ray metric of every process) takes
    the parser about half a second, and a test reads a page several times."""
    from prometheus_client.parser import text_string_to_metric_families

    sample = f"ray_{name}"
    lines = "\n".join(line for line in page.splitlines() if line.startswith((f"{sample}{{", f"{sample} ")))
    return [found.value for family in text_string_to_metric_families(lines) for found in family.samples
            if found.name == sample and labels.items() <= found.labels.items()]


def metric_reaches(name: str, value: float, **labels: str) -> str:
    """Scrape until the summed samples reach `value` (Ray exports on an interval: see tests/serving/conftest.py), then
    return the page."""
    while sum(samples(page := scrape(), name, **labels)) < value:
        time.sleep(0.5)
    return page
