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
    """Values of the samples `name` (Ray's `ray_` prefix added) whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    return [sample.value for family in text_string_to_metric_families(page) for sample in family.samples
            if sample.name == f"ray_{name}" and labels.items() <= sample.labels.items()]


def metric_reaches(name: str, value: float, **labels: str) -> str:
    """Scrape until the summed samples reach `value` (Ray exports on an interval, ~10 s), then return the page."""
    while sum(samples(page := scrape(), name, **labels)) < value:
        time.sleep(0.5)
    return page
