"""A live index at tracker scale: bulk import, memory, search latency and upserts of a served index of --docs reports.

The corpus: the 4,548 OpenOffice reports, then synthetic reports recombined from them up to --docs (default
100,000): each takes one report's title, the first half of a second report's description and the second half of a
third's, the second's product and component, and a filing time drawn between the first and last real ones. Real
text, so tokens, lengths and BM25 statistics stay realistic; the texts are new, so every vector is the model's own.

1. **Bulk import**: the corpus file through `build_index_folder` (what `ray_jobs/build_index.py` runs): Ray Data
   encodes it on --actors encoder actors (default 2) with `backend: auto`, FAISS indexes the shards (`--index-kind`, default
   auto: flat up to 200,000 vectors), BM25 and the document store with the metadata. Timed per step.
2. **Served**: `lmp serve run` of the tracker system (bench/tracker_online.py's run, as bench/serve_reports.py takes
   it) over that folder, `encoder.backend: auto`, HAProxy, a live index (`live.dir`).
   - memory: the resident set of the retriever replica and of the change-log writer, after loading and after the
     upserts (read from /proc);
   - search: the OpenOffice test duplicates as whole reports through `/v1/duplicates`, dense, hybrid and metadata
     mode alternating, p50/p99 at concurrency 1 and 8;
   - upserts: new synthetic reports through `POST /v1/documents`, in batches of 32 and one at a time (documents/s);
   - intact: then imported and upserted reports updated; the index must hold exactly the imported and the new
     reports, each read back by GET with its latest text, and a search for an updated report lists its id once.
3. **Recall**: for each of --recall-kinds (default hnsw and ivf, with the index's default parameters), an index of
   that kind built in process from the import's vectors (build seconds, bytes), and its recall@10 against exact
   search over the same vectors, for the OpenOffice queries encoded on the service's path; for IVF also its
   calibrated nprobe, and recall and ms per query at 16, 32, 64, ... probes.

At 10^6 on 2 cores, `--synthetic-vectors` replaces the import's encoding (synthetic_import: the real reports are
encoded, each synthetic report's vector is mixed from its three sources'); BM25, the store and serving are as
at 10^5. Not yet here (docs/benchmarks.md says so): the rebuild's Ray Data job on the 2-node cluster.

Targets at 10^6 (measured here at --docs): metadata-mode p99 <= 250 ms at c=8, <= 4 GB per retriever replica,
>= 200 upserts/s in batches of 32, approximate recall@10 >= 0.98.

    python bench/serve_scale.py [--docs 100000] [--index-kind auto] [--pipeline-run FOLDER]
    python bench/serve_scale.py --docs 1000000 --synthetic-vectors --index-kind flat_fp16 --recall-kinds flat_fp16,ivf
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import check, lmp_serve, write_result
from serve_reports import measure, served_system, system_arguments

from lmplatform.retrieval import INDEX_KINDS

ROOT = Path(__file__).resolve().parents[1]
METADATA = ["product", "component", "created"]
UPSERT_BATCH = 32


def recombined_reports(real: list[dict[str, Any]], rng: random.Random, prefix: str
                       ) -> Iterator[tuple[dict[str, Any], tuple[int, int, int]]]:
    """Endless (report, the indexes in `real` of the three it recombines) from `real` (served_document's form), ids
    `<prefix><n>`."""
    from lmplatform.data import parse_time

    times = [t for r in real if (t := parse_time(r["metadata"].get("created"), "created")) is not None]
    low, high = min(times), max(times)
    n = 0
    while True:
        ia, ib, ic = rng.randrange(len(real)), rng.randrange(len(real)), rng.randrange(len(real))
        a, b, c = real[ia], real[ib], real[ic]
        head, tail = b["text"][: len(b["text"]) // 2], c["text"][len(c["text"]) // 2:]
        metadata = {k: b["metadata"][k] for k in ("product", "component") if k in b["metadata"]}
        yield ({"id": f"{prefix}{n}", "title": a["title"], "text": (head + " " + tail).strip() or a["title"] or "report",
                "metadata": {**metadata, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                  time.gmtime(rng.uniform(low, high)))}}, (ia, ib, ic))
        n += 1


def synthetic_reports(real: list[dict[str, Any]], rng: random.Random, prefix: str) -> Iterator[dict[str, Any]]:
    return (doc for doc, _ in recombined_reports(real, rng, prefix))


def write_corpus(real: list[dict[str, Any]], docs: int, path: Path) -> np.ndarray:
    """The real reports, then synthetic ones up to `docs`, one flat JSON row each (metadata fields at the top).
    Returns each row's sources [docs, 3]: the real reports a synthetic one recombines, its own index for a real one."""
    extra = recombined_reports(real, random.Random(11), "syn")
    sources = np.empty((docs, 3), dtype=np.int32)
    with path.open("w", encoding="utf-8") as handle:
        for n in range(docs):
            doc, sources[n] = (real[n], (n, n, n)) if n < len(real) else next(extra)
            handle.write(json.dumps({"id": doc["id"], "title": doc["title"], "text": doc["text"], **doc["metadata"]},
                                    ensure_ascii=False) + "\n")
    return sources


SHARD_ROWS = 100_000
MIX = np.array([0.4, 0.3, 0.3], dtype=np.float32)  # title's report, then the two halves of the text


def synthetic_import(corpus: Path, folder: Path, sources: np.ndarray, real: list[dict[str, Any]], model: str,
                     kind: str, cache: Path) -> dict[str, Any]:
    """The bulk import with synthetic vectors (--synthetic-vectors): the real reports are encoded on the service's
    path, and each synthetic one's vector is the normalised mix of its three sources' (MIX) plus Gaussian noise of
    norm about 0.3; then the same FAISS, BM25 and document store as `build_index_folder`. Timed per step."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lmplatform.data import join_fields
    from lmplatform.models import choose_path
    from lmplatform.retrieval import DOCUMENTS_FILE, IndexParams, build_bm25_index, build_index_from_shards, write_document_store

    start = time.perf_counter()
    _, encoder = choose_path(Path(model), max_seq_length=128, cache=cache / "encode_paths.json")
    base = encoder.encode([join_fields(r, ["title", "text"]) for r in real], batch_size=32).astype(np.float32)
    encode_seconds = time.perf_counter() - start
    rng = np.random.default_rng(5)
    ids = [json.loads(line)["id"] for line in corpus.open(encoding="utf-8")]
    shards = folder / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    for first in range(0, len(ids), SHARD_ROWS):
        rows = sources[first:first + SHARD_ROWS]
        mixed = np.einsum("k,nkd->nd", MIX, base[rows]) + rng.normal(0.0, 0.3 / np.sqrt(base.shape[1]),
                                                                     (len(rows), base.shape[1])).astype(np.float32)
        real_rows = rows[:, 0] == rows[:, 1]
        mixed[real_rows] = base[rows[real_rows, 0]]  # a real report keeps its own vector
        mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(mixed.astype(np.float32).ravel()), base.shape[1])
        pq.write_table(pa.table({"id": ids[first:first + SHARD_ROWS], "vector": vectors}),
                       shards / f"shard-{first // SHARD_ROWS:05d}.parquet")
    vectors_seconds = time.perf_counter() - start - encode_seconds
    index = build_index_from_shards(shards, folder / "index", IndexParams(kind=kind))  # type: ignore[arg-type]
    bm25 = build_bm25_index(str(corpus), folder / "index", ["title", "text"], "id", index.ids)
    documents = write_document_store(str(corpus), folder / "index" / DOCUMENTS_FILE, metadata_fields=METADATA)
    return {"seconds": round(time.perf_counter() - start, 1), "encode_seconds": round(encode_seconds, 1),
            "vectors": "synthetic: the real reports' own, and for each synthetic report the normalised mix of its three "
                       "sources' vectors (0.4, 0.3, 0.3) plus Gaussian noise of norm about 0.3",
            "synthetic_vectors_seconds": round(vectors_seconds, 1), "documents": documents, "index_kind": index.kind,
            "index_build_seconds": round(index.stats.build_seconds, 1), "bm25_seconds": bm25["seconds"]}


def bulk_import(corpus: Path, folder: Path, model: str, actors: int, kind: str) -> dict[str, Any]:
    """build_index_folder of the corpus on a Ray started here, timed."""
    import ray

    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.retrieval import IndexParams, build_index_folder

    ensure_ray(None)
    try:
        start = time.perf_counter()
        built = build_index_folder(str(corpus), folder, model=model, actors=actors, cpus_per_actor=1, batch_size=32,
                                   params=IndexParams(kind=kind), max_seq_length=128, metadata_fields=METADATA,
                                   backend="auto")
        seconds = time.perf_counter() - start
    finally:
        ray.shutdown()
    return {"seconds": round(seconds, 1), "encode_seconds": round(built.encode.seconds, 1),
            "documents": built.documents, "index_kind": built.index.kind,
            "index_build_seconds": round(built.index.stats.build_seconds, 1),
            "bm25_seconds": built.bm25["seconds"] if built.bm25 else None}


def loaded_model(url: str, wait_s: float = 1800.0) -> dict[str, Any]:
    """/v1/model once the retriever has loaded (a 503 until then; at 10^6 reports the load takes minutes), asked again
    until it answers; `wait_s` is a safety net against one that never loads."""
    import httpx

    deadline = time.monotonic() + wait_s
    while True:
        try:
            response = httpx.get(f"{url}/v1/model", timeout=60)
            if response.status_code == 200:
                return response.json()
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url}/v1/model did not answer within {wait_s:.0f} s")
        time.sleep(5.0)


def replica_memory_mb() -> dict[str, float]:
    """Resident set (MB) of each Serve replica process on this machine, by deployment (Ray titles its processes
    `ray::ServeReplica:<app>:<deployment>`)."""
    found: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            status = (proc / "status").read_text()
        except OSError:
            continue
        if title.startswith("ray::ServeReplica:"):
            deployment = title.split(":")[-1].split()[0]
            rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            found[deployment] = round(found.get(deployment, 0.0) + rss / 1024, 1)
    return found


def upserts(url: str, documents: Iterator[dict[str, Any]], batches: int, singles: int,
            kept: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Documents/s of `batches` POST /v1/documents of UPSERT_BATCH documents, then of `singles` of one; each document
    sent is kept in `kept` by id."""
    import httpx

    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=300) as client:
        for name, size, count in (("batch_32", UPSERT_BATCH, batches), ("single", 1, singles)):
            latencies = []
            start = time.perf_counter()
            for _ in range(count):
                body = {"documents": [next(documents) for _ in range(size)]}
                kept.update((doc["id"], doc) for doc in body["documents"])
                sent = time.perf_counter()
                client.post("/v1/documents", json=body).raise_for_status()
                latencies.append((time.perf_counter() - sent) * 1000)
            seconds = time.perf_counter() - start
            out[name] = {"requests": count, "documents_per_s": round(size * count / seconds, 1),
                         "p50_ms": round(float(np.percentile(latencies, 50)), 1),
                         "p99_ms": round(float(np.percentile(latencies, 99)), 1)}
            print(f"[bench] upserts, {name}: {out[name]}", flush=True)
    return out


def import_then_upserts_intact(url: str, corpus: Path, imported: int, sent: dict[str, dict[str, Any]],
                               rng: random.Random, sample: int = 500) -> dict[str, Any]:
    """After the bulk import and the live upserts on top of it: nothing missing, nothing duplicated.

    First UPSERT_BATCH imported reports and UPSERT_BATCH upserted ones are sent again with new text (updates, not
    additions). Then the served index must hold exactly imported + len(sent) documents; every upserted document and
    `sample` imported ones are read back by GET with their latest text; and a search by each updated report's new
    text finds that report first, its id once in the hits."""
    from urllib.parse import quote

    import httpx

    from lmplatform.data import join_fields

    rows = rng.sample(range(imported), sample)
    wanted = set(rows)
    imported_docs = {}
    with corpus.open(encoding="utf-8") as handle:
        for n, line in enumerate(handle):
            if n in wanted:
                row = json.loads(line)
                imported_docs[row["id"]] = {"id": row["id"], "title": row["title"], "text": row["text"],
                                            "metadata": {k: row[k] for k in METADATA if k in row}}
    updated = [{**doc, "text": f"{doc['text']} (updated {n})"} for n, doc in
               enumerate(list(imported_docs.values())[:UPSERT_BATCH] + rng.sample(list(sent.values()), UPSERT_BATCH))]
    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=300) as client:
        for doc in updated:  # one a request: a batch of long reports can pass limits.max_body_bytes
            client.post("/v1/documents", json={"documents": [doc]}).raise_for_status()
            (sent if doc["id"] in sent else imported_docs)[doc["id"]] = doc
        out["index_size"] = client.get("/v1/model").json()["index_size"]
        out["index_size_expected"] = imported + len(sent)
        missing, stale = [], []
        for doc_id, doc in {**imported_docs, **sent}.items():
            response = client.get(f"/v1/documents/{quote(doc_id, safe='')}")
            if response.status_code == 404:
                missing.append(doc_id)
            elif response.raise_for_status().json()["text"] != doc["text"]:
                stale.append(doc_id)
        not_first, repeated = [], []
        for doc in updated:
            query = join_fields(doc, ["title", "text"])  # what the replica encoded for the document
            hits = client.post("/v1/search", json={"query": query, "k": 10, "mode": "dense"}).raise_for_status().json()["hits"]
            ids = [hit["id"] for hit in hits]
            if not ids or ids[0] != doc["id"]:
                not_first.append(doc["id"])
            if len(ids) != len(set(ids)):
                repeated.append(doc["id"])
    out.update({"read_back": len(imported_docs) + len(sent), "updated": len(updated), "missing": missing[:10],
                "missing_count": len(missing), "stale_count": len(stale), "searched": len(updated),
                "not_found_first": not_first[:10], "not_found_first_count": len(not_first),
                "repeated_in_hits_count": len(repeated)})
    print(f"[bench] import, then upserts: {out}", flush=True)
    return out


def probes_sweep(index: Any, vectors: np.ndarray, truth: list[set[str]]) -> dict[str, dict[str, float]]:
    """An IVF index's recall@10 against exact search, and ms per query one at a time, at 16, 32, 64, ... probes up
    to all its lists (its calibrated nprobe put back after)."""
    calibrated, nlist = index._index.nprobe, index._index.nlist
    out = {}
    for probes in sorted({min(16 * 2 ** n, nlist) for n in range(20) if 16 * 2 ** (n - 1) < nlist}):
        index._index.nprobe = probes
        found = [len(want & {doc for doc, _ in hits}) / 10 for want, hits in zip(truth, index.search(vectors, 10))]
        start = time.perf_counter()
        for row in vectors[:100]:
            index.search(row, 10)
        out[str(probes)] = {"recall_at_10": round(float(np.mean(found)), 4),
                            "ms_per_query": round((time.perf_counter() - start) * 1000 / min(100, len(vectors)), 2)}
    index._index.nprobe = calibrated
    return out


def approximate_recall(shards: Path, kinds: list[str], work: Path, model: str, queries: list[dict[str, Any]],
                       cache: Path) -> dict[str, Any]:
    """Per approximate kind: an index of it built from the bulk import's shards (its build seconds and size), and its
    recall@10 against exact search over the same vectors for the queries' vectors on the service's path."""
    import faiss

    from lmplatform.data import join_fields
    from lmplatform.models import choose_path
    from lmplatform.retrieval import INDEX_FILE, IndexParams, build_index_from_shards, iter_shards

    _, encoder = choose_path(Path(model), max_seq_length=128, cache=cache)
    vectors = encoder.encode([join_fields(q, ["title", "text"]) for q in queries], batch_size=32)
    exact = faiss.IndexFlatIP(vectors.shape[1])
    ids: list[str] = []
    for shard_ids, shard_vectors in iter_shards(shards):
        ids += shard_ids
        exact.add(np.ascontiguousarray(shard_vectors, dtype=np.float32))
    _, rows = exact.search(vectors, 10)
    truth = [{ids[r] for r in row} for row in rows]
    out: dict[str, Any] = {"queries": len(queries)}
    for kind in kinds:
        start = time.perf_counter()
        index = build_index_from_shards(shards, work / f"index-{kind}", IndexParams(kind=kind))  # type: ignore[arg-type]
        seconds = time.perf_counter() - start
        found = [len(want & {doc for doc, _ in hits}) / 10 for want, hits in zip(truth, index.search(vectors, 10))]
        out[kind] = {"recall_at_10": round(float(np.mean(found)), 4), "build_seconds": round(seconds, 1),
                     "bytes": (work / f"index-{kind}" / INDEX_FILE).stat().st_size, **index.stats.extra}
        if kind in ("ivf", "ivfpq"):
            out[kind]["by_nprobe"] = probes_sweep(index, vectors, truth)
        print(f"[bench] {kind}: {out[kind]}", flush=True)
    return out


def main(argv: Optional[list[str]] = None) -> None:
    parser = system_arguments(__doc__)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--index-kind", default="auto", choices=INDEX_KINDS)
    parser.add_argument("--actors", type=int, default=2, help="Ray Data encoder actors of the bulk import (1 CPU each).")
    parser.add_argument("--recall-kinds", default="hnsw,ivf",
                        help="Approximate index kinds built from the import's vectors and measured against exact search.")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", type=int, default=120, help="Search requests per mode and concurrency.")
    parser.add_argument("--upsert-batches", type=int, default=20)
    parser.add_argument("--upsert-singles", type=int, default=100)
    parser.add_argument("--port", type=int, default=8768)
    parser.add_argument("--name", default=None, help="Result file bench/results/<name>.json (default serve_scale_<docs>).")
    parser.add_argument("--synthetic-vectors", action="store_true",
                        help="Encode only the real reports; every synthetic report's vector is mixed from its sources' "
                        "(the FAISS part at 10^6 without encoding 10^6 texts on 2 cores).")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    folder, system, real, queries = served_system(out, args.data, args.pipeline_run)
    work = out / "scale" / (f"{args.docs}-{args.index_kind}" + ("-synthetic" if args.synthetic_vectors else ""))
    cache = out / "serve-cache"
    os.environ["LMP_CACHE_DIR"] = str(cache)  # the import's encoder actors choose their path as the replicas do
    corpus = work / "corpus.jsonl"
    built_file = work / "bulk_import.json"
    if not built_file.is_file():
        work.mkdir(parents=True, exist_ok=True)
        sources = write_corpus(real, args.docs, corpus)
        if args.synthetic_vectors:
            built = synthetic_import(corpus, work / "folder", sources, real, system["model_dir"], args.index_kind, cache)
        else:
            built = bulk_import(corpus, work / "folder", system["model_dir"], args.actors, args.index_kind)
        built_file.write_text(json.dumps(built))
    built = json.loads(built_file.read_text())
    print(f"[bench] bulk import of {args.docs} reports: {built}", flush=True)

    live = work / "live"
    settings = ["encoder.backend=auto", f"cache_dir={cache}", f"live.dir={live}"]
    new_reports = synthetic_reports(real, random.Random(23), "new")
    served: dict[str, Any] = {}
    import httpx

    shutil.rmtree(live, ignore_errors=True)
    with lmp_serve(system["model_uri"], f"sqlite:///{out / 'mlflow.db'}", work / "folder" / "index", args.port,
                   settings, ingress="haproxy", wait_s=1800) as url:
        model = loaded_model(url)
        served["index_size"], served["encoder_choice"] = model["index_size"], model["encoder_choice"]
        served["memory_mb_loaded"] = replica_memory_mb()
        print(f"[bench] served {model['index_size']} documents; memory (MB): {served['memory_mb_loaded']}", flush=True)
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            served[f"c{concurrency}"] = measure(url, queries, concurrency, args.requests, rounds=2, kinds=("report",))
        sent: dict[str, dict[str, Any]] = {}
        served["upserts"] = upserts(url, new_reports, args.upsert_batches, args.upsert_singles, sent)
        served["memory_mb_after_upserts"] = replica_memory_mb()
        served["intact"] = import_then_upserts_intact(url, corpus, args.docs, sent, random.Random(29))
        served["live_seq"] = httpx.get(f"{url}/v1/model", timeout=60).json()["live_seq"]
    recall = approximate_recall(work / "folder" / "shards", args.recall_kinds.split(","), work, system["model_dir"],
                                queries, cache / "encode_paths.json") if args.recall_kinds else None
    checks = {}
    if "c8" in served:
        checks["metadata_p99_c8_ms"] = check("metadata p99 at c=8 (ms)", served["c8"]["report"]["metadata"]["p99_ms"],
                                             250.0, higher_is_better=False)
    retriever = served["memory_mb_after_upserts"].get("RetrieverDeployment", 0.0)
    checks["retriever_memory_mb"] = check("retriever replica memory (MB)", retriever, 4096.0, higher_is_better=False)
    checks["upserts_per_s_batch_32"] = check("upserts/s in batches of 32", served["upserts"]["batch_32"]["documents_per_s"],
                                             200.0)
    intact = served["intact"]
    checks["import_then_upserts_intact"] = check(
        "documents missing, stale, extra or repeated after the import and the upserts",
        intact["missing_count"] + intact["stale_count"] + intact["repeated_in_hits_count"]
        + abs(intact["index_size"] - intact["index_size_expected"]), 0, higher_is_better=False)
    for kind in (args.recall_kinds.split(",") if args.recall_kinds else []):
        checks[f"{kind}_recall_at_10"] = check(f"{kind} recall@10 against exact", recall[kind]["recall_at_10"], 0.98)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_result(args.name or f"serve_scale_{args.docs}", {
        "config": config, "system": {"model_uri": system["model_uri"], "pipeline_run": folder.name},
        "bulk_import": built, "queries": len(queries), "serve": served, "recall": recall, "checks": checks,
        "load_average": [round(load, 2) for load in os.getloadavg()]})


if __name__ == "__main__":
    main()
