"""Load and latency of the serving app on 127.0.0.1: p50/p95/p99 and requests/s at concurrency 1, 8, 32.

The corpus is real text (bug reports: title + description; STS-B sentences) from
../shared/data (--data), repeated with an id suffix up to --docs documents so the index
has the target size while sentence lengths stay realistic. Each distinct text is
encoded once and its vector reused for its repeats (identical text, identical
vector), so building a 100k index costs the encoding of the distinct texts only.

The app is deployed twice from the same index: with @serve.batch, then without
(each request encoded alone). Every level sends --requests POST /v1/search (k=10)
after a warm-up; queries are report titles and STS sentences. The in-process
baseline is the same model and index in this process: encode one query + search,
with the same torch thread count as the embedder replica. The same queries are also
run in-process as batches of --max-batch-size: single / batched cost per query is the
most any batching can gain on this hardware (`batching_ceiling`).

Where a request's time goes (one request end to end, at c=1): the in-process encode + search; the same
search called on the retriever replica through a Serve handle from this process (adds Ray's actor call,
@serve.batch and the worker thread); the HTTP request (adds the client, Serve's proxy or not, and the
ingress: FastAPI, validation, the answer's JSON); GET /healthz over the same HTTP path (no model call: the
path's own cost). `breakdown_c1` holds the four p50s.

Targets: p50 at concurrency 1 <= 1.5x in-process encode+search;
batched requests/s >= 2x unbatched at concurrency 32.

    python bench/serve_load.py                                # 100k docs, MiniLM (the full run)
    python bench/serve_load.py --docs 2000 --requests 50      # a quick check that it works
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result

ROOT = Path(__file__).resolve().parents[1]


def distinct_texts(data: Path) -> tuple[list[dict[str, str]], list[str]]:
    """(documents, queries): bug reports and STS sentences, de-duplicated; queries are held-out-looking texts."""
    docs: list[dict[str, str]] = []
    seen: set[str] = set()
    queries: list[str] = []
    for project in ("openoffice", "hadoop", "seamonkey"):
        for line in (data / "duplicate_bug_reports" / project / "corpus.jsonl").open(encoding="utf-8"):
            row = json.loads(line)
            title, text = (row.get("title") or "").strip(), (row.get("description") or "").strip()[:2000]
            if text and text not in seen:
                seen.add(text)
                docs.append({"id": f"{project}-{row['id']}-{len(docs)}", "title": title, "text": text})
                if title:
                    queries.append(title)
    for split in ("train", "dev", "test"):
        for line in (data / "stsbenchmark" / f"sts-{split}.jsonl").open(encoding="utf-8"):
            row = json.loads(line)
            for n, key in enumerate(("sentence1", "sentence2")):
                sentence = row[key].strip()
                if sentence and sentence not in seen:
                    seen.add(sentence)
                    docs.append({"id": f"sts-{split}-{len(docs)}", "title": "", "text": sentence})
                    if n == 1:
                        queries.append(sentence)
    rng = random.Random(13)
    rng.shuffle(docs)
    rng.shuffle(queries)
    return docs, queries


def build_index(model: str, docs_wanted: int, out: Path, batch_size: int, data: Path = SHARED_DATA) -> dict[str, Any]:
    """Index + document store of `docs_wanted` documents (distinct texts repeated with #r<n> ids)."""
    from lmplatform import Encoder
    from lmplatform.retrieval import DOCUMENTS_FILE, VectorIndex

    if (out / "index.faiss").is_file() and (out / DOCUMENTS_FILE).is_file():
        return json.loads((out / "bench_build.json").read_text())
    distinct, _ = distinct_texts(data)
    distinct = distinct[:docs_wanted]
    out.mkdir(parents=True, exist_ok=True)
    cached = out / "distinct_vectors.npy"
    start = time.perf_counter()
    if cached.is_file():
        vectors = np.load(cached)
    else:
        encoder = Encoder.from_pretrained(model)
        vectors = encoder.encode([". ".join(p for p in (d["title"], d["text"]) if p) for d in distinct],
                                 batch_size=batch_size, show_progress=True)
        np.save(cached, vectors)
    encode_s = time.perf_counter() - start
    ids, rows = [], []
    out.mkdir(parents=True, exist_ok=True)
    with (out / DOCUMENTS_FILE).open("w", encoding="utf-8") as handle:
        for n in range(docs_wanted):
            doc = distinct[n % len(distinct)]
            repeat = n // len(distinct)
            doc_id = doc["id"] if repeat == 0 else f"{doc['id']}#r{repeat}"
            ids.append(doc_id)
            rows.append(n % len(distinct))
            handle.write(json.dumps({"id": doc_id, "title": doc["title"], "text": doc["text"]}, ensure_ascii=False) + "\n")
    index = VectorIndex.build(ids, vectors[rows], kind="auto")
    index.save(out)
    info = {"documents": docs_wanted, "distinct_texts": len(distinct), "encode_seconds": round(encode_s, 1),
            "index_kind": index.kind, "index_build_seconds": round(index.stats.build_seconds, 2)}
    (out / "bench_build.json").write_text(json.dumps(info, indent=2))
    return info


def percentiles(latencies_ms: list[float]) -> dict[str, float]:
    values = np.asarray(latencies_ms)
    return {f"p{q}_ms": round(float(np.percentile(values, q)), 2) for q in (50, 95, 99)}


def in_process(model: str, index_dir: Path, queries: list[str], threads: int, batch: int, backend: str = "torch"
               ) -> dict[str, float]:
    import torch

    from lmplatform import Encoder
    from lmplatform.retrieval import VectorIndex

    torch.set_num_threads(threads)
    encoder, index = Encoder.from_pretrained(model, backend=backend), VectorIndex.load(index_dir)
    for query in queries[:5]:
        index.search(encoder.encode([query]), 10)
    latencies = []
    for query in queries:
        start = time.perf_counter()
        index.search(encoder.encode([query]), 10)
        latencies.append((time.perf_counter() - start) * 1000)
    # The most batching can save: the same queries as batches of `batch`, per query.
    start = time.perf_counter()
    for first in range(0, len(queries), batch):
        index.search(encoder.encode(queries[first:first + batch], batch_size=batch), 10)
    batched_ms = (time.perf_counter() - start) * 1000 / len(queries)
    single_ms = float(np.mean(latencies))
    return percentiles(latencies) | {
        "mean_ms": round(single_ms, 2), f"batch{batch}_ms_per_query": round(batched_ms, 2),
        "batching_ceiling": round(single_ms / batched_ms, 2), "queries": len(queries), "torch_threads": threads}


async def send(url: str, bodies: list[dict[str, Any]], concurrency: int, warm_up: int = 10, route: str = "/v1/search"
               ) -> tuple[list[float], int, float]:
    """POST every body to `route` from `concurrency` concurrent clients, after `warm_up` of them sent alone
    (connections, first batch, caches): (latency per request in ms, failed requests, wall seconds)."""
    import httpx

    latencies: list[float] = []
    failures = 0
    pending = iter(bodies)

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal failures
        for body in pending:
            start = time.perf_counter()
            response = await client.post(route, json=body)
            latencies.append((time.perf_counter() - start) * 1000)
            failures += response.status_code != 200

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        for body in bodies[:warm_up]:
            await client.post(route, json=body)
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return latencies, failures, wall


async def drive(url: str, queries: list[str], concurrency: int, total: int) -> dict[str, Any]:
    """`total` searches from `concurrency` concurrent clients; latency per request and overall requests/s."""
    bodies = [{"query": queries[n % len(queries)][:500], "k": 10} for n in range(total)]
    latencies, failures, wall = await send(url, bodies, concurrency, warm_up=min(10, total))
    return {"concurrency": concurrency, "requests": len(latencies), "failed": failures,
            "requests_per_s": round(len(latencies) / wall, 2), **percentiles(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=400, help="Requests per concurrency level.")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--model", default="default", help="Model folder or 'default' (the packaged MiniLM).")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-wait-ms", type=float, default=0.0)
    parser.add_argument("--retriever-cpus", type=float, default=1.0)
    parser.add_argument("--backend", default="torch", choices=["torch", "onnx", "openvino"],
                        help="The encoder backend, served and in process alike (the index is built by torch fp32).")
    parser.add_argument("--ingress", default="proxy,direct",
                        help="proxy: Serve's HTTP proxy; direct: clients call the ingress replica's own port; "
                             "haproxy: HAProxy on the service's port forwards to it (serving/control.INGRESS_ENV).")
    parser.add_argument("--encode-batch-size", type=int, default=64, help="Batch size when building the index.")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "bench" / "serve_load"))
    parser.add_argument("--name", default="serve_load", help="Result file bench/results/<name>.json.")
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder (bug reports, STS-B).")
    args = parser.parse_args()

    from lmplatform.models import resolve_model_path

    model = str(resolve_model_path(args.model))
    key = hashlib.sha256(f"{model}|{args.docs}".encode()).hexdigest()[:10]
    index_dir = Path(args.work_dir) / f"index-{args.docs}-{key}"
    build = build_index(model, args.docs, index_dir, args.encode_batch_size, Path(args.data))
    print(f"index: {json.dumps(build)}", flush=True)
    _, queries = distinct_texts(Path(args.data))
    queries = queries[:max(args.requests, 200)]
    threads = max(1, int(args.retriever_cpus))
    baseline = in_process(model, index_dir, queries[:128], threads, args.max_batch_size, args.backend)
    print(f"in-process encode+search: {baseline}", flush=True)

    levels = [int(c) for c in args.concurrency.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {}
    for ingress in args.ingress.split(","):
        runs.update(serve_levels(ingress, args, model, index_dir, threads, queries, levels))

    checks = {}
    breakdown = {}
    for ingress in args.ingress.split(","):
        by = {mode: {r["concurrency"]: r for r in runs[f"{ingress}-{mode}"]} for mode in ("batched", "unbatched")}
        if 1 in levels:
            handle = runs[f"{ingress}-batched-handle"][0]
            breakdown[ingress] = {"in_process_p50_ms": baseline["p50_ms"], "retriever_handle_p50_ms": handle["p50_ms"],
                                  "http_route_only_p50_ms": runs[f"{ingress}-batched-route"][0]["p50_ms"],
                                  "http_p50_ms": by["batched"][1]["p50_ms"]}
            print(f"{ingress}: where a request's p50 goes: {json.dumps(breakdown[ingress])}", flush=True)
        if 1 in levels:
            ratio = by["batched"][1]["p50_ms"] / baseline["p50_ms"]
            checks[f"{ingress}_p50_c1_over_in_process"] = check(
                f"{ingress}: p50 at c=1 / in-process encode+search", ratio, 1.5, higher_is_better=False)
        top = max(levels)
        gain = by["batched"][top]["requests_per_s"] / by["unbatched"][top]["requests_per_s"]
        checks[f"{ingress}_batched_rps_gain_c{top}"] = check(f"{ingress}: batched / unbatched requests/s at c={top}", gain, 2.0)
    write_result(args.name, {
        "config": {k: v for k, v in vars(args).items()}, "index": build, "in_process": baseline,
        "serve": runs, "breakdown_c1": breakdown, "checks": checks,
    })


def retriever_handle(app: str, url: str, queries: list[str], total: int) -> dict[str, Any]:
    """One search at a time called on the retriever replica through a Serve handle, as the ingress calls it:
    the request's time without HTTP, the proxy and the ingress."""
    import httpx
    from ray import serve

    from lmplatform.serving import ServeLimits

    release = httpx.get(f"{url}/v1/model", timeout=60).json()["release_id"]
    handle = serve.get_deployment_handle("RetrieverDeployment", app_name=app)
    text_chars = ServeLimits().snippet_chars + 1
    return one_at_a_time(lambda n: handle.search.remote(release, [queries[n % len(queries)][:500]], 10, text_chars)
                         .result(), total)


def route_only(url: str, total: int) -> dict[str, Any]:
    """GET /healthz one at a time: the same client, proxy (or not) and ingress as a search, no model call. What
    this costs is the HTTP path's own share of a search's time."""
    import httpx

    with httpx.Client(timeout=60) as client:
        return one_at_a_time(lambda n: client.get(f"{url}/healthz").raise_for_status(), total)


def one_at_a_time(call: Callable[[int], Any], total: int) -> dict[str, Any]:
    """Latency percentiles of `call(n)` for n in 0..total+9, one after another; the first ten warm up, as for HTTP."""
    latencies = []
    for n in range(total + 10):
        start = time.perf_counter()
        call(n)
        if n >= 10:
            latencies.append((time.perf_counter() - start) * 1000)
    return {"concurrency": 1, "requests": len(latencies), **percentiles(latencies)}


def serve_levels(ingress: str, args: argparse.Namespace, model: str, index_dir: Path, threads: int,
                 queries: list[str], levels: list[int]) -> dict[str, list[dict[str, Any]]]:
    """Both batching modes at every concurrency level, on a Ray started for this ingress mode."""
    import os

    import ray
    from ray import serve

    from lmplatform import ServeSettings
    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.serving import control

    # Serve reads these at import in every Ray process: they must be set before Ray starts.
    os.environ.update(control.INGRESS_ENV[ingress])
    ensure_ray(None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    control.start("127.0.0.1", port)
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for mode in ("batched", "unbatched"):
            settings = ServeSettings(
                model=model, index=str(index_dir), num_threads=threads, cache_dir=str(Path(args.work_dir) / "cache"),
                batching={"enabled": mode == "batched", "max_batch_size": args.max_batch_size,
                          "batch_wait_timeout_s": args.batch_wait_ms / 1000},
                limits={"max_texts": min(32, args.max_batch_size)}, encoder={"backend": args.backend},
            )
            deployments = [
                {"name": "RetrieverDeployment", "ray_actor_options": {"num_cpus": args.retriever_cpus},
                 "max_ongoing_requests": 128},
                {"name": "ClassifierDeployment", "ray_actor_options": {"num_cpus": 0.05}},
                {"name": "ServeIngress", "ray_actor_options": {"num_cpus": 0.25}},
            ]
            name = f"bench-{mode}"
            quiet = {"log_level": "WARNING", "enable_access_log": False}  # per-request logs cost CPU on 2 cores
            control.deploy(control.application_config(settings, name=name, deployments=deployments, logging_config=quiet),
                           timeout_s=600,
                           progress=lambda line: print(f"  {line}", flush=True))
            active = control.ingress(name)
            active.require(ingress)
            url = active.client_url(f"http://127.0.0.1:{port}")
            print(f"  {ingress} ingress: clients call {url}", flush=True)
            key = f"{ingress}-{mode}"
            runs[f"{key}-handle"] = [retriever_handle(name, url, queries, args.requests)]
            print(f"{key + '-handle':16s} c=1   {json.dumps(runs[f'{key}-handle'][0])}", flush=True)
            runs[f"{key}-route"] = [route_only(url, args.requests)]
            print(f"{key + '-route':16s} c=1   {json.dumps(runs[f'{key}-route'][0])}", flush=True)
            runs[key] = []
            for concurrency in levels:
                result = asyncio.run(drive(url, queries, concurrency, args.requests))
                print(f"{key:16s} c={concurrency:<3d} {json.dumps(result)}", flush=True)
                runs[key].append(result)
            serve.delete(name)
    finally:
        serve.shutdown()
        ray.shutdown()
    return runs


if __name__ == "__main__":
    main()
