"""The service's application metrics, through Ray Serve's metrics API (scraped as Prometheus).

Ray exports every metric on each node's metrics export port (`ray.nodes()[i]["MetricsExportPort"]`,
path `/metrics`), prefixed `ray_`, with the replica's `deployment`, `replica` and `application`
tags added by Serve (docs/serving.md#metrics has the scrape config):

| metric | kind | tags | what |
|---|---|---|---|
| `lmp_requests_total` | counter | route, method, status | every HTTP answer, refusals of the guard (401, 413) included |
| `lmp_request_latency_ms` | histogram | route | time from the request reaching the ingress to its answer |
| `lmp_searches_total` | counter | mode, reranked | /v1/search answers by first stage (dense, hybrid, metadata) and re-ranking |
| `lmp_batch_requests` / `lmp_batch_texts` | histogram | method | requests / texts per batched forward pass (`@serve.batch`) |
| `lmp_index_documents` | gauge | release | documents in the index of each release a replica holds |
| `lmp_model_info` | gauge | registered_name, model_version, alias, release | 1 for the release the ingress serves |
| `lmp_documents_total` | counter | op | documents upserted / deleted (acknowledged) through /v1/documents |
| `lmp_live_committed_seq` | gauge | | the change log's last durable sequence number (the writer) |
| `lmp_live_applied_seq` | gauge | release | the sequence number a retriever replica's index of the release is at |

`route` is the path of the route that answers, as declared in `routes.ROUTES` (or one of FastAPI's `PAGES`), its
parameters named, not filled (`/v1/documents/{doc_id}` for every document's own path): `ROUTE_LABELS`. Any other
path is `other`: a path a client made up must not become a new time series.
The model's version is `model_version`: Ray labels every metric with its own `Version`, and a
`version` tag beside it is not exported. Ray turns each histogram observation into its bucket's
midpoint, so a histogram's `_sum` is approximate; its buckets and `_count` are exact.
Ray drops a gauge series it has not been sent for two export intervals (~20 s), so a process
re-sends its live gauges every `REFRESH_S` (`_LiveGauges`); a release a replica no longer holds
(or no longer serves) is simply not re-sent, and its series ends.
Metric objects are made on first use in each replica (Ray needs a connected worker for them), and
held in this module, which replicas import by reference, so the middleware and the deployments
share one set per process.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Optional

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lmplatform.serving.routes import PAGES, ROUTES, app_path

# (how Starlette matches the path, its label): a path with parameters is labelled by its template.
_MATCHERS = [compile_path(path)[:2] for path in dict.fromkeys([*PAGES.values(), *(route.path for route in ROUTES)])]
ROUTE_LABELS = frozenset(label for _, label in _MATCHERS)
_TEMPLATES = [(regex, label) for regex, label in _MATCHERS if "{" in label]
LATENCY_BOUNDARIES_MS = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000]
BATCH_BOUNDARIES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
REFRESH_S = 5.0
_METRICS: dict[str, Any] = {}


def _metric(name: str) -> Any:
    """The process's metric `name`, made on first use."""
    if name not in _METRICS:
        from ray.serve import metrics

        made = {
            "lmp_requests_total": lambda: metrics.Counter(
                "lmp_requests_total", description="HTTP requests answered, by route, method and status code.",
                tag_keys=("route", "method", "status")),
            "lmp_request_latency_ms": lambda: metrics.Histogram(
                "lmp_request_latency_ms", description="Milliseconds from a request reaching the ingress to its answer.",
                boundaries=LATENCY_BOUNDARIES_MS, tag_keys=("route",)),
            "lmp_searches_total": lambda: metrics.Counter(
                "lmp_searches_total", description="Searches answered, by first stage (dense, hybrid, metadata) and re-ranking.",
                tag_keys=("mode", "reranked")),
            "lmp_batch_requests": lambda: metrics.Histogram(
                "lmp_batch_requests", description="Requests computed together in one batch.",
                boundaries=BATCH_BOUNDARIES, tag_keys=("method",)),
            "lmp_batch_texts": lambda: metrics.Histogram(
                "lmp_batch_texts", description="Texts (or query-document pairs) in one batched forward pass.",
                boundaries=BATCH_BOUNDARIES, tag_keys=("method",)),
            "lmp_index_documents": lambda: metrics.Gauge(
                "lmp_index_documents", description="Documents in the index of each loaded release.",
                tag_keys=("release",)),
            "lmp_documents_total": lambda: metrics.Counter(
                "lmp_documents_total", description="Documents upserted or deleted through /v1/documents (acknowledged).",
                tag_keys=("op",)),
            "lmp_live_committed_seq": lambda: metrics.Gauge(
                "lmp_live_committed_seq", description="The change log's last durable sequence number."),
            "lmp_live_applied_seq": lambda: metrics.Gauge(
                "lmp_live_applied_seq", description="The change log sequence number a replica's index is at.",
                tag_keys=("release",)),
            "lmp_model_info": lambda: metrics.Gauge(
                "lmp_model_info", description="1 for the release being served, 0 for earlier ones.",
                tag_keys=("registered_name", "model_version", "alias", "release")),
        }
        _METRICS[name] = made[name]()
    return _METRICS[name]


class _LiveGauges:
    """The gauge values this process reports, re-sent every REFRESH_S by a daemon thread started on first use."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def set(self, name: str, value: float, tags: dict[str, str]) -> None:
        with self._lock:
            self._values[(name, tuple(sorted(tags.items())))] = value
            if self._thread is None:
                self._thread = threading.Thread(target=self._refresh, name="lmp-metrics-gauges", daemon=True)
                self._thread.start()
        _metric(name).set(value, tags=tags)

    def forget(self, name: str, keep: Any) -> None:
        """Stop sending the series of gauge `name` whose tags `keep(tags)` rejects."""
        with self._lock:
            self._values = {k: v for k, v in self._values.items() if k[0] != name or keep(dict(k[1]))}

    def _refresh(self) -> None:
        while True:
            time.sleep(REFRESH_S)
            with self._lock:
                values = list(self._values.items())
            for (name, tags), value in values:
                _metric(name).set(value, tags=dict(tags))


_GAUGES = _LiveGauges()


def scrape_urls() -> list[str]:
    """The Prometheus endpoint of every live node of the connected Ray (where these metrics are read)."""
    import ray

    return [f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            for node in ray.nodes() if node["Alive"] and node.get("MetricsExportPort")]


def route_label(scope: Scope) -> str:
    path = app_path(scope)
    if path in ROUTE_LABELS:
        return path
    return next((label for regex, label in _TEMPLATES if regex.match(path)), "other")


def record_request(route: str, method: str, status: int | str, milliseconds: float) -> None:
    _metric("lmp_requests_total").inc(1, tags={"route": route, "method": method, "status": str(status)})
    _metric("lmp_request_latency_ms").observe(milliseconds, tags={"route": route})


def record_search(mode: str, reranked: bool) -> None:
    _metric("lmp_searches_total").inc(1, tags={"mode": mode, "reranked": str(reranked).lower()})


def record_batch(method: str, requests: int, texts: int) -> None:
    _metric("lmp_batch_requests").observe(requests, tags={"method": method})
    _metric("lmp_batch_texts").observe(texts, tags={"method": method})


def record_index_sizes(held: dict[str, int]) -> None:
    """The index size of each release this replica holds; the series of releases it dropped end."""
    _GAUGES.forget("lmp_index_documents", lambda tags: tags["release"] in held)
    for release, size in held.items():
        _GAUGES.set("lmp_index_documents", size, {"release": release})


def record_documents(op: str, count: int) -> None:
    _metric("lmp_documents_total").inc(count, tags={"op": op})


def record_committed(seq: int) -> None:
    _GAUGES.set("lmp_live_committed_seq", seq, {})


def record_applied(seqs: dict[str, int]) -> None:
    """The applied sequence number of each release this replica holds; the series of dropped releases end."""
    _GAUGES.forget("lmp_live_applied_seq", lambda tags: tags["release"] in seqs)
    for release, seq in seqs.items():
        _GAUGES.set("lmp_live_applied_seq", seq, {"release": release})


def record_model(active: dict[str, Optional[str]]) -> None:
    """The release served now ({registered_name, model_version, alias, release}); the earlier one's series ends."""
    tags = {k: v or "" for k, v in active.items()}
    _GAUGES.forget("lmp_model_info", lambda held: held == tags)
    _GAUGES.set("lmp_model_info", 1, tags)


class RequestMetrics:
    """ASGI middleware counting every answer by route and status, and timing it (outermost: it sees the guard's refusals)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: Optional[int] = None

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except BaseException:
            status = status or 500  # Starlette's outermost handler answers 500 for what raised through here
            raise
        finally:
            # "none": the client went away before an answer (e.g. mid-body); nothing was sent.
            record_request(route_label(scope), scope.get("method", ""), status or "none",
                           (time.perf_counter() - start) * 1000)
