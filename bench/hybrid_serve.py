"""Served /v1/search latency, dense against hybrid (BM25 fused with the bi-encoder), on the OpenOffice corpus.

The index is the 4,548 OpenOffice reports (title and description) encoded by MiniLM ('default') in a flat
FAISS index, with the BM25 index of the same texts beside it: what ray_jobs/build_index.py writes. Queries
are the duplicate reports of pairs.jsonl, title and description cut to 500 characters, as a new report
would be searched. One application (batched; Serve's HTTP proxy unless --ingress) answers both modes; at each concurrency
the dense and the hybrid requests alternate in rounds, so a change of load on a shared machine hits both
alike. Hybrid uses the default fusion settings (convex, weight 0.2, top 100 of each retriever pooled).
In-process, the same query is encoded and searched both ways, and BM25's share (tokenize + score every
document + fuse) is timed alone.

Target: hybrid p50 <= 1.3x dense p50 at every concurrency.

    python bench/hybrid_serve.py [--data ../shared/data] [--requests 200] [--concurrency 1,8]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from lmplatform.data import join_fields

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result
from serve_load import percentiles, send

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ["title", "description"]  # a report's text, as lmp evaluate's scenarios join it


def corpus_and_queries(data: Path) -> tuple[list[dict[str, str]], list[str]]:
    folder = data / "duplicate_bug_reports" / "openoffice"
    reports = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
    documents = [{"id": str(r["id"]), "title": r.get("title") or "", "text": r.get("description") or ""} for r in reports]
    by_id = {str(r["id"]): r for r in reports}
    duplicates = [json.loads(line)["duplicate_id"] for line in (folder / "pairs.jsonl").open(encoding="utf-8")]
    texts = {d: join_fields(by_id[d], FIELDS)[:500] for d in dict.fromkeys(duplicates) if d in by_id}
    queries = [text for text in texts.values() if text]
    return documents, queries


def build(model: str, documents: list[dict[str, str]], out: Path) -> dict[str, Any]:
    """Flat index, BM25 index and document store of the corpus (kept in `out` for the next run; bench/hybrid_quality.py
    searches the same index)."""
    from lmplatform import Encoder
    from lmplatform.retrieval import BM25_DIR, DOCUMENTS_FILE, BM25Retriever, VectorIndex

    if (out / "build.json").is_file():
        return json.loads((out / "build.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    ids, texts = [d["id"] for d in documents], [join_fields(d, ["title", "text"]) for d in documents]
    start = time.perf_counter()
    vectors = Encoder.from_pretrained(model).encode(texts, batch_size=32, show_progress=True)
    encode_s = time.perf_counter() - start
    index = VectorIndex.build(ids, vectors, kind="flat")
    index.save(out)
    start = time.perf_counter()
    bm25 = BM25Retriever()
    bm25.index(ids, texts)
    bm25.save(out / BM25_DIR)
    bm25_s = time.perf_counter() - start
    with (out / DOCUMENTS_FILE).open("w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
    info = {"documents": len(ids), "encode_seconds": round(encode_s, 1), "bm25_index_seconds": round(bm25_s, 2),
            "bm25_bytes": sum(f.stat().st_size for f in (out / BM25_DIR).iterdir()),
            "faiss_bytes": (out / "index.faiss").stat().st_size}
    (out / "build.json").write_text(json.dumps(info, indent=2))
    return info


def in_process(model: str, index_dir: Path, queries: list[str], threads: int, backend: str = "torch") -> dict[str, Any]:
    """Per query: encode + dense search, encode + hybrid search, and hybrid's BM25-and-fusion part alone."""
    import torch

    from lmplatform import Encoder
    from lmplatform.retrieval import BM25_DIR, BM25Retriever, FusionSettings, VectorIndex, hybrid_search

    torch.set_num_threads(threads)
    encoder, index = Encoder.from_pretrained(model, backend=backend), VectorIndex.load(index_dir)
    bm25, settings = BM25Retriever.load(index_dir / BM25_DIR), FusionSettings()
    timings: dict[str, list[float]] = {"dense": [], "hybrid": [], "bm25_and_fusion": []}
    for n, query in enumerate(queries):
        start = time.perf_counter()
        vector = encoder.encode([query])
        encoded = time.perf_counter()
        dense = index.search(vector, 10)
        dense_done = time.perf_counter()
        fused = hybrid_search(index, bm25, vector, [query], 10, settings)
        hybrid_done = time.perf_counter()
        assert dense[0] and fused[0]
        if n >= 5:  # warm-up
            timings["dense"].append((dense_done - start) * 1000)
            timings["hybrid"].append((encoded - start + hybrid_done - dense_done) * 1000)
            timings["bm25_and_fusion"].append((hybrid_done - dense_done - (dense_done - encoded)) * 1000)
    return {name: percentiles(values) | {"mean_ms": round(float(np.mean(values)), 3)} for name, values in timings.items()}


def serve_both(model: str, index_dir: Path, queries: list[str], levels: list[int], requests: int, rounds: int,
               work: Path, ingress: str = "proxy", backend: str = "torch") -> dict[str, Any]:
    import ray
    from ray import serve

    from lmplatform import ServeSettings
    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.serving import control

    os.environ.update(control.INGRESS_ENV[ingress])  # read by every Ray process at its start
    ensure_ray(None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    control.start("127.0.0.1", port)
    try:
        settings = ServeSettings(model=model, index=str(index_dir), num_threads=1, cache_dir=str(work / "cache"),
                                 encoder={"backend": backend})
        deployments = [{"name": "RetrieverDeployment", "ray_actor_options": {"num_cpus": 1}, "max_ongoing_requests": 128},
                       {"name": "ClassifierDeployment", "ray_actor_options": {"num_cpus": 0.05}},
                       {"name": "ServeIngress", "ray_actor_options": {"num_cpus": 0.25}}]
        quiet = {"log_level": "WARNING", "enable_access_log": False}
        control.deploy(control.application_config(settings, name="bench-hybrid", deployments=deployments, logging_config=quiet),
                       timeout_s=600, progress=lambda line: print(f"  {line}", flush=True))
        active = control.ingress("bench-hybrid")
        active.require(ingress)
        url = active.client_url(f"http://127.0.0.1:{port}")
        results: dict[str, Any] = {}
        for concurrency in levels:
            latencies: dict[str, list[float]] = {"dense": [], "hybrid": []}
            failed, wall = {"dense": 0, "hybrid": 0}, {"dense": 0.0, "hybrid": 0.0}
            per_round = requests // rounds
            for r in range(rounds):
                for mode in ("dense", "hybrid") if r % 2 == 0 else ("hybrid", "dense"):
                    chosen = [queries[(r * per_round + n) % len(queries)] for n in range(per_round)]
                    bodies = [{"query": q, "k": 10, "mode": mode} for q in chosen]
                    times, failures, seconds = asyncio.run(send(url, bodies, concurrency, warm_up=5 if r == 0 else 0))
                    latencies[mode] += times
                    failed[mode] += failures
                    wall[mode] += seconds
            results[f"c{concurrency}"] = {
                mode: {"requests": len(latencies[mode]), "failed": failed[mode],
                       "requests_per_s": round(len(latencies[mode]) / wall[mode], 2), **percentiles(latencies[mode])}
                for mode in latencies}
            print(f"c={concurrency}: {json.dumps(results[f'c{concurrency}'])}", flush=True)
        return results
    finally:
        serve.shutdown()
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder (OpenOffice duplicates).")
    parser.add_argument("--model", default="default", help="Model folder or 'default' (the packaged MiniLM).")
    parser.add_argument("--requests", type=int, default=200, help="Requests per mode and concurrency level.")
    parser.add_argument("--rounds", type=int, default=4, help="Alternations of the two modes per level.")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--ingress", default="proxy", choices=["proxy", "direct", "haproxy"],
                        help="How HTTP reaches the ingress replica (serving/control.INGRESS_ENV).")
    parser.add_argument("--backend", default="torch", choices=["torch", "onnx", "openvino"],
                        help="The encoder's backend, served and in process (the index is built by torch fp32).")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "bench" / "hybrid_serve"))
    parser.add_argument("--name", default="hybrid_serve", help="Result file bench/results/<name>.json.")
    args = parser.parse_args()

    from lmplatform.models import resolve_model_path

    model = str(resolve_model_path(args.model))
    documents, queries = corpus_and_queries(Path(args.data))
    index_dir = Path(args.work_dir) / "index"
    built = build(model, documents, index_dir)
    print(f"index: {json.dumps(built)}; {len(queries)} queries", flush=True)
    local = in_process(model, index_dir, queries[:105], threads=1, backend=args.backend)
    print(f"in-process: {json.dumps(local)}", flush=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    served = serve_both(model, index_dir, queries, levels, args.requests, args.rounds, Path(args.work_dir), args.ingress,
                        args.backend)
    checks = {f"hybrid_p50_over_dense_c{c}": check(f"hybrid / dense p50 at c={c}", served[f"c{c}"]["hybrid"]["p50_ms"]
                                                   / served[f"c{c}"]["dense"]["p50_ms"], 1.3, higher_is_better=False)
              for c in levels}
    checks["in_process_hybrid_p50_over_dense"] = check("in-process hybrid / dense p50", local["hybrid"]["p50_ms"]
                                                       / local["dense"]["p50_ms"], 1.3, higher_is_better=False)
    write_result(args.name, {"config": vars(args), "index": built, "queries": len(queries), "in_process": local,
                             "serve": served, "checks": checks,
                             # whether the machine was idle: the load average (1, 5, 15 minutes) at the end
                             "load_average": [round(load, 2) for load in os.getloadavg()]})


if __name__ == "__main__":
    main()
