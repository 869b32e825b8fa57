"""The live index's BM25 at tracker scale: memory, build, whole-report queries and upserts, beside bm25s.

The corpus is bench/serve_scale.py's: the 4,548 OpenOffice reports, then synthetic reports recombined from them, up
to each of --docs. Each (implementation, size) runs in a fresh process, which makes the corpus texts, reads its
resident set, builds the index, and reads it again with the texts still held. The difference is what the index
costs a replica, including what the build's transient allocations left behind. Then it times:
- queries: the 500 OpenOffice test duplicates as whole reports (title and description, as `/v1/duplicates` scores
  them), each `query_scores` plus the top 10, p50/p99 ms;
- upserts (the live index's `IncrementalBM25` only): --upsert-batches batches of 32 new synthetic reports added,
  documents/s, the slowest add, and how many of them folded the tail into the base; then one fold timed;
- top-10 agreement of the two implementations' hits, at the sizes both ran.

The reference is bm25s (`BM25Retriever`), which a release without a live index serves: precomputed scores, and no
way to add a document. It runs at sizes up to --reference-docs, since it tokenizes the whole corpus at once.

    python bench/bm25_scale.py [--docs 100000,1000000] [--reference-docs 100000]
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result
from serve_reports import reports_and_queries
from serve_scale import UPSERT_BATCH, synthetic_reports
from tracker_online import import_export

IMPLEMENTATIONS = ("incremental", "bm25s")
FIELDS = ["title", "text"]


def resident_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def corpus_texts(real: list[dict[str, Any]], docs: int) -> tuple[list[str], list[str]]:
    """(ids, texts) of serve_scale's corpus of `docs` reports, as the live index joins their fields."""
    from lmplatform.data import join_fields

    extra = synthetic_reports(real, random.Random(11), "syn")
    rows = [real[n] if n < len(real) else next(extra) for n in range(docs)]
    return [r["id"] for r in rows], [join_fields(r, FIELDS) for r in rows]


def measure_one(implementation: str, docs: int, root: Path, upsert_batches: int) -> dict[str, Any]:
    """One (implementation, size), in this process: memory, build seconds, query latency, upserts, the queries' top 10."""
    from lmplatform.data import join_fields
    from lmplatform.retrieval import BM25Retriever, IncrementalBM25

    real, queries = reports_and_queries(root)
    ids, texts = corpus_texts(real, docs)
    query_texts = [join_fields(q, FIELDS) for q in queries]
    gc.collect()
    before = resident_mb()
    index = IncrementalBM25() if implementation == "incremental" else BM25Retriever()
    start = time.perf_counter()
    index.index(ids, texts)
    build_seconds = time.perf_counter() - start
    gc.collect()  # the texts stay: freeing them here would hide part of what the index took
    out: dict[str, Any] = {"implementation": implementation, "documents": docs,
                           "build_seconds": round(build_seconds, 1), "memory_mb": round(resident_mb() - before, 1)}
    if implementation == "incremental":
        out["postings"] = index.postings
    latencies, tops = [], []
    for text in query_texts:
        start = time.perf_counter()
        hits = index.top_hits(index.query_scores([text])[0], 10)
        latencies.append((time.perf_counter() - start) * 1000)
        tops.append([doc for doc, _ in hits])
    out["query_p50_ms"] = round(float(np.percentile(latencies, 50)), 1)
    out["query_p99_ms"] = round(float(np.percentile(latencies, 99)), 1)
    out["top10"] = tops
    if implementation == "incremental" and upsert_batches:
        new = synthetic_reports(real, random.Random(23), "new")
        times, folds = [], index.folds
        for _ in range(upsert_batches):
            batch = [next(new) for _ in range(UPSERT_BATCH)]
            start = time.perf_counter()
            index.add([r["id"] for r in batch], [join_fields(r, FIELDS) for r in batch])
            times.append(time.perf_counter() - start)
        out["upserts"] = {"batches": upsert_batches, "documents_per_s": round(UPSERT_BATCH * len(times) / sum(times), 1),
                          "slowest_add_ms": round(max(times) * 1000, 1), "folds": index.folds - folds}
        start = time.perf_counter()
        index.fold()
        out["upserts"]["fold_seconds"] = round(time.perf_counter() - start, 2)
        gc.collect()
        out["memory_mb_after_upserts"] = round(resident_mb() - before, 1)
    return out


def run_child(implementation: str, docs: int, root: Path, upsert_batches: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", implementation, "--docs", str(docs), "--root", str(root),
               "--upsert-batches", str(upsert_batches)]
    print(f"[bench] {implementation} at {docs:,} documents", flush=True)
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"[bench] {({k: v for k, v in result.items() if k != 'top10'})}", flush=True)
    return result


def agreement(ours: list[list[str]], reference: list[list[str]]) -> float:
    """Mean share of the reference's top 10 that ours also returns (ties at the cut may differ)."""
    shares = [len(set(a) & set(b)) / len(b) for a, b in zip(ours, reference) if b]
    return round(float(np.mean(shares)), 4)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--out", type=Path, default=Path("runs/bm25_scale"))
    parser.add_argument("--docs", default="100000,1000000")
    parser.add_argument("--reference-docs", type=int, default=100_000,
                        help="The largest size bm25s runs at (it tokenizes the whole corpus at once).")
    parser.add_argument("--upsert-batches", type=int, default=50)
    parser.add_argument("--child", choices=IMPLEMENTATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child, int(args.docs), args.root, args.upsert_batches)))
        return
    root = args.out.resolve() / "data"
    if not (root / "reports.jsonl").is_file():
        import_export(args.data, root)
    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    for docs in (int(d) for d in args.docs.split(",")):
        ours = run_child("incremental", docs, root, args.upsert_batches)
        row = {"documents": docs, "incremental": {k: v for k, v in ours.items() if k != "top10"}}
        if docs <= args.reference_docs:
            reference = run_child("bm25s", docs, root, 0)
            row["bm25s"] = {k: v for k, v in reference.items() if k != "top10"}
            row["memory_ratio"] = round(ours["memory_mb"] / reference["memory_mb"], 2)
            row["query_p50_ratio"] = round(ours["query_p50_ms"] / reference["query_p50_ms"], 2)
            row["top10_agreement"] = agreement(ours["top10"], reference["top10"])
            checks[f"top10_agreement_{docs}"] = check(f"top-10 agreement with bm25s at {docs:,}",
                                                      row["top10_agreement"], 0.99)
        rows.append(row)
    largest = rows[-1]["incremental"]
    checks["memory_mb_largest"] = check(f"incremental BM25 memory at {largest['documents']:,} (MB)",
                                        largest["memory_mb"], 2048.0, higher_is_better=False)
    write_result("bm25_scale", {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                                           if k not in ("child", "root")},
                                "queries": "OpenOffice test duplicates, whole reports", "rows": rows, "checks": checks})


if __name__ == "__main__":
    main()
