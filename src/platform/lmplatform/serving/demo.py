"""Serve a model over a small corpus, send real queries over HTTP, print the hits, shut down: the demo's last step.

The index is built in this process (a demo corpus is small); the app then runs
exactly as `lmp serve run` deploys it, on 127.0.0.1, and is shut down at the end.
"""
from __future__ import annotations

import json
import logging
import shlex
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from lmplatform.data.fields import join_fields
from lmplatform.data.readers import Record, read_rows
from lmplatform.models.resolve import resolve_model_path
from lmplatform.ray_runtime import ensure_ray
from lmplatform.retrieval.index import VectorIndex
from lmplatform.retrieval.store import DOCUMENTS_FILE, write_document_store
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.serving.release import fetch, resolve_release
from lmplatform.serving.settings import ServeSettings

DEMO_QUERIES = (
    "users stay logged in after single sign-out",
    "search cluster unhealthy after a node reboot",
    "service memory keeps growing until the pod is killed",
)


def curl_command(base_url: str, path: str, body: dict[str, Any]) -> str:
    """The shell command that sends `body` to `path`, as printed for the reader to paste.

    Plain `curl -d`, which sends `Content-Type: application/x-www-form-urlencoded`: the
    ingress reads a JSON body whatever the Content-Type (`http_guard`), so the shortest
    command works. The body is shell-quoted, so a query with a quote in it still pastes.
    """
    return f"curl -s {base_url}{path} -d {shlex.quote(json.dumps(body))}"


def build_demo_index(model: str, corpus: str | Path, out: Path, text_fields: Sequence[str] = ("title", "text"),
                     label_field: Optional[str] = "component") -> Path:
    """Encode `corpus` (JSONL with id and text fields) with `model`; save index + document store in `out`."""
    from lmplatform.models.encoder import Encoder
    rows = [r.fields for r in read_rows(str(corpus), "jsonl") if isinstance(r, Record) and r.fields.get("id") is not None]
    texts = [join_fields(r, list(text_fields)) for r in rows]
    vectors = Encoder.from_pretrained(model).encode(texts, show_progress=True)
    VectorIndex.build([str(r["id"]) for r in rows], vectors, kind="auto").save(out)
    write_document_store(corpus, out / DOCUMENTS_FILE, text_fields=[f for f in text_fields if f != "title"],
                         label_field=label_field)
    return out


def serve_and_query(model: str, corpus: str | Path, queries: Sequence[str] = DEMO_QUERIES, k: int = 3,
                    tracking_uri: Optional[str] = None, work_dir: Optional[Path] = None,
                    say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Deploy `model` over `corpus`, POST each query to /v1/search and /v1/classify, print, shut Serve down."""
    import httpx
    from ray import serve

    from lmplatform.serving import control

    work = Path(work_dir or tempfile.mkdtemp(prefix="lmp-serve-demo-"))
    if model.startswith("models:/"):
        # Pin the alias once: the index and the service must use the same version.
        served = resolve_release(model, tracking_uri).model_uri
        folder = fetch(served, resolve_tracking_uri(tracking_uri), str(work / "cache"))
    else:
        served = str(resolve_model_path(model))
        folder = Path(served)
    say(f"[demo] building the index of {corpus} with {served}")
    index = build_demo_index(str(folder), corpus, work / "index")
    settings = ServeSettings(model=served, tracking_uri=tracking_uri, index=str(index), cache_dir=str(work / "cache"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ensure_ray(serving=True)
    # The demo shows its own deploy progress and each replica's readiness through it: Serve's INFO
    # lifecycle lines (driver, controller, replicas) would repeat that.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    control.start("127.0.0.1", port, system_log_level="WARNING")
    answers = []
    try:
        small = {"num_cpus": 0.25}
        deployments = [{"name": d, "ray_actor_options": small}
                       for d in ("RetrieverDeployment", "ClassifierDeployment", "ServeIngress")]
        control.deploy(control.application_config(settings, name="lmp-demo", deployments=deployments,
                                                  logging_config={"log_level": "WARNING"}),
                       progress=lambda line: say(f"[demo] {line}"))
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            info = client.get("/v1/model").json()
            say(f"[demo] serving {info['release_id']} ({info['index_size']} documents) at http://127.0.0.1:{port}")
            for query in queries:
                hits = client.post("/v1/search", json={"query": query, "k": k}).json()["hits"]
                label = client.post("/v1/classify", json={"texts": [query]}).json()["predictions"][0]["label"]
                say(f"\n$ {curl_command(f'127.0.0.1:{port}', '/v1/search', {'query': query, 'k': k})}")
                for hit in hits:
                    say(f"  {hit['score']:.3f}  {hit['id']}  {hit['title']}")
                say(f"  classified as: {label}")
                answers.append({"query": query, "hits": hits, "label": label})
    finally:
        serve.shutdown()
        say("[demo] service shut down")
    return answers
