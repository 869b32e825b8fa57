"""A live index under load: upserts beside searches, a replica killed, a new champion promoted (the OpenOffice corpus).

The OpenOffice reports (title and description) are split by creation date: the older 90% are the base corpus,
indexed ahead with MiniLM ('default', version 1 of a registered model); the newest 10% arrive while serving, as
new bug reports do, each one an upsert of one document (once they have all arrived, the arrived ones are edited:
upserted again with a changed text); every fifth upsert also deletes a base report. Version 2 is MiniLM without
its last layer (another model, other vectors, width 384), registered with no index.

1. frozen against live: two services side by side over the same index, one read-only (live updates off, the
   service as it was) and one live, in rounds of windows: searches to the frozen one, searches to the live one
   alone, then searches to the live one beside `--upsert-clients` clients upserting as fast as they are answered
   (the rate the service sustains); `--search-clients` clients search in every window. One upsert client searches
   for each document it upserted right after its 200 answer: how long until an answer has it;
3. kill: upserts and searches run while one of the 2 retriever replicas is killed (Serve replaces it);
   afterwards every acknowledged document is found, no deleted one, and both replicas hold the same index
   (the same fingerprint of ids and float32 vectors);
4. promote: upserts and searches run while the alias moves to version 2; the service rebuilds its index
   with Ray Data from the documents it serves and reloads (as `lmp serve run --watch-interval` does);
   afterwards every upserted document and a sample of the base corpus are found with version 2's vectors
   (a search with the document's own text returns it with cosine >= 0.999, which the old vectors do not give),
   and both replicas hold the same documents and vectors.

Targets: 0 failed requests in every phase; a document searchable <= 1 s after its 200.

    python bench/serve_index.py [--data ../shared/data] [--search-clients 4] [--upsert-clients 2]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result
from serve_load import percentiles

ROOT = Path(__file__).resolve().parents[1]
NAME = "serve-index-bench"
FIELDS = ["title", "text"]
FOUND_SCORE = 0.999  # a search with a document's own text, encoded by the model its vector came from


def reports(data: Path) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in (data / "duplicate_bug_reports" / "openoffice" / "corpus.jsonl").open(encoding="utf-8")]
    rows.sort(key=lambda r: (r.get("created") or "", str(r["id"])))
    return [{"id": str(r["id"]), "title": r.get("title") or "", "text": r.get("description") or "x"} for r in rows]


def query_of(doc: dict[str, str]) -> str:
    return f"{doc['title']}. {doc['text']}" if doc["title"] else doc["text"]


def build_base(model: str, documents: list[dict[str, str]], out: Path) -> dict[str, Any]:
    """Flat index + BM25 + store of the base corpus, as ray_jobs/build_index.py --fields title,text writes it (kept)."""
    from lmplatform import Encoder
    from lmplatform.retrieval import BM25_DIR, DOCUMENTS_FILE, BM25Retriever, VectorIndex

    if (out / "build.json").is_file() and json.loads((out / "build.json").read_text())["documents"] == len(documents):
        return json.loads((out / "build.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ids, texts = [d["id"] for d in documents], [query_of(d) for d in documents]
    start = time.perf_counter()
    VectorIndex.build(ids, Encoder.from_pretrained(model).encode(texts, batch_size=32, show_progress=True)).save(out)
    bm25 = BM25Retriever()
    bm25.index(ids, texts)
    bm25.save(out / BM25_DIR)
    with (out / DOCUMENTS_FILE).open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in documents)
    info = {"documents": len(ids), "encode_seconds": round(time.perf_counter() - start, 1)}
    (out / "build.json").write_text(json.dumps(info))
    return info


def shorter_model(model: str, out: Path) -> Path:
    """Version 2: the model without its last transformer layer (saved once)."""
    from transformers import AutoModel, AutoTokenizer

    if (out / "config.json").is_file():
        return out
    network = AutoModel.from_pretrained(model)
    network.encoder.layer = network.encoder.layer[:-1]
    network.config.num_hidden_layers -= 1
    network.save_pretrained(out)
    AutoTokenizer.from_pretrained(model).save_pretrained(out)
    return out


@dataclass
class Tally:
    """What one load run saw: latencies and failures per kind of request, acknowledged changes, visibility delays."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"search": [], "upsert": [], "delete": []})
    failures: dict[str, list[str]] = field(default_factory=lambda: {"search": [], "upsert": [], "delete": []})
    acked: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)  # upserted id -> (seq, document)
    deleted: set[str] = field(default_factory=set)
    visible_ms: list[float] = field(default_factory=list)  # from an upsert's 200 to the search answer that found it
    searches_to_find: list[int] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seconds": round(self.seconds, 1)}
        for kind, values in self.latencies.items():
            if values:
                out[kind] = {"requests": len(values), "failed": len(self.failures[kind]),
                             "per_s": round(len(values) / self.seconds, 2), **percentiles(values)}
        out["failed"] = sum(len(f) for f in self.failures.values())
        out["failures"] = [f for fs in self.failures.values() for f in fs][:5]
        if self.visible_ms:
            out["visible"] = {"documents": len(self.visible_ms), "max_ms": round(max(self.visible_ms), 1),
                              **percentiles(self.visible_ms), "searches_needed_max": max(self.searches_to_find)}
        return out


class Load:
    """Search clients and (optionally) upsert clients against the service, in a thread of their own until `stop()`."""

    def __init__(self, url: str, queries: list[str], search_clients: int, arrivals: deque,
                 upsert_clients: int, deletable: list[str]):
        """arrivals: the documents still to arrive (each upserted once, whichever load takes it; then edits of them);
        deletable: base ids still to delete (one after every fifth upsert of a client)."""
        self.url, self.queries, self.search_clients = url, queries, search_clients
        self.arrivals, self.upsert_clients, self.deletable = arrivals, upsert_clients, deletable
        self.tally = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> "Load":
        self._thread.start()
        return self

    def stop(self) -> Tally:
        self._stop.set()
        self._thread.join()
        return self.tally

    def wait_for(self, condition: Callable[[Tally], bool]) -> None:
        while not condition(self.tally) and self._thread.is_alive():
            time.sleep(0.1)

    async def _run(self) -> None:
        import httpx

        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=self.url, timeout=300, limits=limits) as client:
            start = time.perf_counter()
            await asyncio.gather(*[self._search(client, n) for n in range(self.search_clients)],
                                 *[self._upsert(client, n) for n in range(self.upsert_clients)])
            self.tally.seconds = time.perf_counter() - start

    async def _timed(self, kind: str, call: Any) -> Optional[Any]:
        start = time.perf_counter()
        try:
            response = await call
        except Exception as exc:  # a connection dropped counts as a failed request
            self.tally.failures[kind].append(f"{kind}: {type(exc).__name__}: {exc}")
            return None
        self.tally.latencies[kind].append((time.perf_counter() - start) * 1000)
        if response.status_code != 200:
            self.tally.failures[kind].append(f"{kind}: {response.status_code} {response.text[:200]}")
            return None
        return response.json()

    async def _search(self, client: Any, first: int) -> None:
        n = first
        while not self._stop.is_set():
            body = {"query": self.queries[n % len(self.queries)], "k": 10}
            answer = await self._timed("search", client.post("/v1/search", json=body))
            if answer is not None:
                self.tally.versions.add(answer["model_version"])
            n += self.search_clients

    async def _upsert(self, client: Any, client_n: int) -> None:
        n = 0
        while not self._stop.is_set():
            doc = self.arrivals.popleft()
            self.arrivals.append({**doc, "text": f"{doc['text']} (edited)"})  # arrives again later, edited
            answer = await self._timed("upsert", client.post("/v1/documents", json={"documents": [doc]}))
            if answer is not None:
                self.tally.acked[doc["id"]] = (answer["seq"], doc)
                self.tally.versions.add(answer["model_version"])
                if client_n == 0:
                    await self._find(client, doc, time.perf_counter())
            if n % 5 == 4 and self.deletable:
                gone = self.deletable.pop()
                if await self._timed("delete", client.delete(f"/v1/documents/{gone}")) is not None:
                    self.tally.deleted.add(gone)
            n += 1

    async def _find(self, client: Any, doc: dict[str, str], acked_at: float) -> None:
        """Search for a document just upserted until an answer has it; the delay from its 200 to that answer."""
        for searches in range(1, 51):
            answer = await self._timed("search", client.post("/v1/search", json={"query": query_of(doc), "k": 10}))
            if answer is not None and any(hit["id"] == doc["id"] for hit in answer["hits"]):
                self.tally.visible_ms.append((time.perf_counter() - acked_at) * 1000)
                self.tally.searches_to_find.append(searches)
                return
        self.tally.failures["search"].append(f"{doc['id']} not found in 50 searches after its upsert")


def deploy(model: str, tracking_uri: str, work: Path, live: bool, name: str) -> None:
    from lmplatform import ServeSettings
    from lmplatform.serving import control

    settings = ServeSettings(
        model=model, tracking_uri=tracking_uri, cache_dir=str(work / "cache"), num_threads=1,
        live={"dir": str(work / "changes"), "fields": FIELDS, "rebuild_cpus": 0.5} if live else {},
        limits={"max_query_chars": 100_000, "max_text_chars": 100_000, "max_body_bytes": 10_000_000, "max_k": 100},
    )
    # Two applications side by side, and a rebuild actor (0.5 CPU) beside the live one: reservations that fit 2 CPUs.
    # Every replica still runs on both cores, with one torch thread.
    cpus = {"RetrieverDeployment": 0.25, "ClassifierDeployment": 0.05, "ServeIngress": 0.1, "ChangeLogWriter": 0.05}
    deployments = [{"name": d, "ray_actor_options": {"num_cpus": c}, "num_replicas": 2 if d == "RetrieverDeployment" else 1,
                    "max_ongoing_requests": 128} for d, c in cpus.items() if live or d != "ChangeLogWriter"]
    quiet = {"log_level": "WARNING", "enable_access_log": False}
    control.deploy(control.application_config(settings, name=name, deployments=deployments, logging_config=quiet,
                                              route_prefix=f"/{name}"),
                   timeout_s=900, progress=lambda line: print(f"  {line}", flush=True))


def replicas_state(name: str) -> list[dict[str, Any]]:
    from lmplatform.serving import ask_each, control

    answers = ask_each(control.details()["applications"][name], "RetrieverDeployment", timeout_s=600)
    states = []
    for answer in answers:
        if answer.error is not None:
            states.append({"replica": answer.replica_id, "error": answer.error})
            continue
        live, newest = answer.status["live"], answer.status["newest"]
        states.append({"replica": answer.replica_id, "release": newest, **{k: v for k, v in live[newest].items()
                                                                            if k != "recent_found"}})
    return states


def verify(url: str, present: list[dict[str, str]], absent: list[dict[str, str]], concurrency: int) -> dict[str, Any]:
    """Search each document's own text: each of `present` found (its id among the hits with cosine >= FOUND_SCORE),
    none of `absent` among the hits."""
    import httpx

    missing: list[str] = []
    back: list[str] = []
    pending = iter([(d, True) for d in present] + [(d, False) for d in absent])

    async def worker(client: httpx.AsyncClient) -> None:
        for doc, held in pending:
            response = await client.post("/v1/search", json={"query": query_of(doc), "k": 10})
            response.raise_for_status()
            hits = {h["id"]: h["score"] for h in response.json()["hits"]}
            if held and hits.get(doc["id"], -1.0) < FOUND_SCORE:
                missing.append(doc["id"])
            if not held and doc["id"] in hits:
                back.append(doc["id"])

    async def run() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as client:
            await asyncio.gather(*(worker(client) for _ in range(concurrency)))

    start = time.perf_counter()
    asyncio.run(run())
    return {"checked": len(present), "not_found": len(missing), "examples": missing[:5], "deleted_checked": len(absent),
            "deleted_found": len(back), "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder (OpenOffice duplicates).")
    parser.add_argument("--model", default="default", help="Version 1: a model folder or 'default' (the packaged MiniLM).")
    parser.add_argument("--new-fraction", type=float, default=0.1, help="Newest reports kept out of the base, upserted.")
    parser.add_argument("--limit", type=int, default=0, help="Use only this many reports (0: all; a quick run).")
    parser.add_argument("--search-clients", type=int, default=4)
    parser.add_argument("--upsert-clients", type=int, default=2)
    parser.add_argument("--window-s", type=float, default=15.0, help="Seconds per load window.")
    parser.add_argument("--windows", type=int, default=3, help="Rounds of frozen / live idle / live upserting windows.")
    parser.add_argument("--base-sample", type=int, default=600, help="Base documents checked after the promotion.")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "bench" / "serve_index"))
    parser.add_argument("--name", default="serve_index", help="Result file bench/results/<name>.json.")
    args = parser.parse_args()

    import random

    import ray
    from mlflow.tracking import MlflowClient
    from ray import serve

    from lmplatform.models import resolve_model_path
    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.serving import control
    from lmplatform.testing import register_with_index

    load_start = os.getloadavg()
    model = str(resolve_model_path(args.model))
    every = reports(Path(args.data))
    every = every[-args.limit:] if args.limit else every
    by_id = {d["id"]: d for d in every}
    cut = int(len(every) * (1 - args.new_fraction))
    base, arrivals = every[:cut], deque(every[cut:])
    work = Path(args.work_dir)
    built = build_base(model, base, work / f"index-v1-{len(base)}")
    v2_dir = shorter_model(model, work / "model-v2")
    run_dir = work / time.strftime("run-%Y%m%d-%H%M%S")
    (run_dir / "mlruns").mkdir(parents=True)
    tracking_uri = f"sqlite:///{run_dir / 'mlruns' / 'mlflow.db'}"
    register_with_index(tracking_uri, NAME, Path(model), work / f"index-v1-{len(base)}", "champion", "serve-index-bench")
    register_with_index(tracking_uri, NAME, v2_dir, None, experiment="serve-index-bench")
    queries = [query_of(d) for d in random.Random(0).sample(base, min(500, len(base)))]
    deletable = [d["id"] for d in random.Random(1).sample(base, len(base) // 10)]
    print(f"base {len(base)} reports, {len(arrivals)} arriving; index {json.dumps(built)}", flush=True)

    ensure_ray(None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    control.start("127.0.0.1", port)
    result: dict[str, Any] = {"config": vars(args), "base_documents": len(base), "arriving": len(arrivals), "index": built,
                              "note": "measured on a shared 2-core machine under load from other sessions"}
    champion = f"models:/{NAME}@champion"
    try:
        # 1. frozen against live: both services over the same index, in rounds of windows.
        deploy(champion, tracking_uri, run_dir, live=False, name="frozen")
        deploy(champion, tracking_uri, run_dir, live=True, name="live")
        frozen_url, url = f"http://127.0.0.1:{port}/frozen", f"http://127.0.0.1:{port}/live"
        frozen, idle, busy = Tally(), Tally(), Tally()
        for _ in range(args.windows):
            for into, target, upserters in ((frozen, frozen_url, 0), (idle, url, 0), (busy, url, args.upsert_clients)):
                load = Load(target, queries, args.search_clients, arrivals, upserters, deletable).start()
                time.sleep(args.window_s)
                _merge(into, load.stop())
        result["frozen"], result["live_idle"], result["live_upserting"] = frozen.summary(), idle.summary(), busy.summary()
        for phase in ("frozen", "live_idle", "live_upserting"):
            print(f"{phase}: {json.dumps(result[phase])}", flush=True)
        serve.delete("frozen")
        acked, deleted = dict(busy.acked), set(busy.deleted)

        # 2. kill a retriever replica during the load.
        load = Load(url, queries, args.search_clients, arrivals, args.upsert_clients, deletable).start()
        time.sleep(args.window_s / 2)
        killed = kill_one_retriever("live")
        time.sleep(args.window_s)
        seen = load.stop()
        acked.update(seen.acked)
        deleted |= seen.deleted
        wait_replaced("live", killed, 2)
        states = replicas_state("live")
        held, gone = [doc for i, (_, doc) in acked.items() if i not in deleted], [by_id[i] for i in sorted(deleted)]
        result["kill"] = {"killed_replica": killed, **seen.summary(), "replicas": states,
                          "replicas_agree": len({(s.get("fingerprint"), s.get("documents")) for s in states}) == 1,
                          "check": verify(url, held, gone, args.search_clients)}
        print(f"kill: {json.dumps(result['kill'])}", flush=True)

        # 3. promote version 2 during the load: the service rebuilds its index and reloads by itself.
        load = Load(url, queries, args.search_clients, arrivals, args.upsert_clients, deletable).start()
        time.sleep(args.window_s / 2)
        lines: list[str] = []
        watching = threading.Event()
        watcher = threading.Thread(target=control.watch, args=("live", 2.0, watching.is_set,
                                                               lambda line: (lines.append(line), print(f"  {line}", flush=True))))
        watcher.start()
        promoted_at = time.perf_counter()
        MlflowClient(tracking_uri).set_registered_model_alias(NAME, "champion", "2")
        while not any("reloaded" in line or "failed" in line for line in lines):
            time.sleep(0.5)
        moved_s = time.perf_counter() - promoted_at
        load.wait_for(lambda t: any("/2" in v for v in t.versions))
        time.sleep(args.window_s / 2)
        seen = load.stop()
        watching.set()
        watcher.join()
        acked.update(seen.acked)
        deleted |= seen.deleted
        states = replicas_state("live")
        upserted, gone = [doc for i, (_, doc) in acked.items() if i not in deleted], [by_id[i] for i in sorted(deleted)]
        kept = [d for d in base if d["id"] not in deleted]
        sample = random.Random(2).sample(kept, min(args.base_sample, len(kept)))
        expected = len(kept) + len([i for i in acked if i not in deleted and i not in {d["id"] for d in base}])
        result["promote"] = {"seconds_to_move": round(moved_s, 1), "log": [line[:300] for line in lines], **seen.summary(),
                             "replicas": states, "expected_documents": expected,
                             "replicas_hold_expected": all(s.get("documents") == expected for s in states),
                             "replicas_agree": len({(s.get("fingerprint"), s.get("documents")) for s in states}) == 1,
                             "check_upserted": verify(url, upserted, gone, args.search_clients),
                             "check_base_sample": verify(url, sample, [], args.search_clients)}
        print(f"promote: {json.dumps(result['promote'])}", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()

    frozen_s, busy_s = result["frozen"]["search"], result["live_upserting"]["search"]
    result["checks"] = {
        "failed_requests": check("failed requests in every phase", sum(result[p]["failed"] for p in
                                                                    ("frozen", "live_idle", "live_upserting", "kill", "promote")),
                                 0, higher_is_better=False),
        "visible_max_ms": check("a document searchable after its 200 (ms, max)", result["live_upserting"]["visible"]["max_ms"],
                                1000, higher_is_better=False),
        "kill_lost": check("acknowledged documents not found after the kill", result["kill"]["check"]["not_found"]
                           + result["kill"]["check"]["deleted_found"], 0, higher_is_better=False),
        "replicas_differ": check("phases after which the 2 replicas hold other documents or vectors",
                                 sum(not result[p]["replicas_agree"] for p in ("kill", "promote")), 0, higher_is_better=False),
        "promote_lost": check("documents not found with version 2's vectors", result["promote"]["check_upserted"]["not_found"]
                              + result["promote"]["check_base_sample"]["not_found"]
                              + result["promote"]["check_upserted"]["deleted_found"], 0, higher_is_better=False),
    }
    result["search_p50_upserting_over_frozen"] = round(busy_s["p50_ms"] / frozen_s["p50_ms"], 3)
    result["search_p99_upserting_over_frozen"] = round(busy_s["p99_ms"] / frozen_s["p99_ms"], 3)
    result["search_p50_live_idle_over_frozen"] = round(result["live_idle"]["search"]["p50_ms"] / frozen_s["p50_ms"], 3)
    result["load_average"] = {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]}
    write_result(args.name, result)


def _merge(into: Tally, seen: Tally) -> None:
    for kind in into.latencies:
        into.latencies[kind] += seen.latencies[kind]
        into.failures[kind] += seen.failures[kind]
    into.acked.update(seen.acked)
    into.deleted |= seen.deleted
    into.visible_ms += seen.visible_ms
    into.searches_to_find += seen.searches_to_find
    into.versions |= seen.versions
    into.seconds += seen.seconds


def kill_one_retriever(name: str) -> str:
    import ray

    from lmplatform.serving import SERVE_NAMESPACE, control, running_replicas

    victim = running_replicas(control.details()["applications"][name], "RetrieverDeployment")[0]
    ray.kill(ray.get_actor(victim["actor_name"], namespace=SERVE_NAMESPACE), no_restart=True)
    print(f"  killed retriever replica {victim['replica_id']}", flush=True)
    return str(victim["replica_id"])


def wait_replaced(name: str, killed: str, count: int) -> None:
    """Until `count` retriever replicas run and the killed one is no longer listed (the controller saw it die)."""
    from lmplatform.serving import control, running_replicas

    while True:
        running = {r["replica_id"] for r in running_replicas(control.details()["applications"][name], "RetrieverDeployment")}
        if len(running) >= count and killed not in running:
            return
        time.sleep(0.5)


if __name__ == "__main__":
    main()
