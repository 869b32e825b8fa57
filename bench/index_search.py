"""FAISS index benchmark: build time, memory, query latency p50/p99 and recall@10 vs exact (Flat).

Random unit vectors (384-d like MiniLM) at each size; queries are fresh random unit vectors,
searched one at a time (the serving pattern). Memory is the serialized index size.
Random vectors are the worst case for approximate search: with no cluster structure, a
query's true top 10 are barely closer than the rest, so HNSW and IVF recall here is far
below what the same settings give on real embeddings (see docs/evaluation_retrieval.md).

    python bench/index_search.py [--sizes 100000,1000000] [--queries 200] [--kinds flat,hnsw,ivf,ivfpq] [--name NAME]
    python bench/index_search.py --kinds flat,flat_fp16 --name index_search_fp16   # half the memory, the same ranking?
    python bench/index_search.py --real-index runs/bench/serve_load/index-100000-<key>   # real MiniLM vectors

With --real-index (a saved flat VectorIndex, e.g. the one bench/serve_load.py builds), the
distinct vectors of that index are the data: --queries of them are held out as queries and
the rest are indexed, so recall is measured on real embeddings instead.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result

DIM = 384


def unit(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):  # chunks keep the float64 temporaries small
        x = rng.standard_normal((min(100_000, n - start), DIM), dtype=np.float32)
        out[start : start + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def real_vectors(folder: str, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct vectors of a saved flat index, shuffled: (corpus, held-out queries)."""
    from lmplatform.retrieval import VectorIndex

    index = VectorIndex.load(folder)
    stored = index._index.reconstruct_n(0, len(index))  # a flat index keeps the vectors themselves
    distinct = np.unique(stored, axis=0)
    distinct = distinct[np.random.default_rng(0).permutation(len(distinct))]
    return distinct[queries:], distinct[:queries]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", default="flat,hnsw,ivf,ivfpq")
    parser.add_argument("--name", default=None, help="The result file's name (default index_search, or "
                        "index_search_real with --real-index).")
    parser.add_argument("--real-index", default=None, help="A saved flat VectorIndex whose distinct vectors are the data.")
    args = parser.parse_args()

    from lmplatform.retrieval import VectorIndex

    results = []
    checks = {}
    # A generator: one size's vectors in memory at a time (1e6 x 384 floats is 1.5 GB).
    datasets = (iter([real_vectors(args.real_index, args.queries)]) if args.real_index else
                ((unit(int(size), seed=0), unit(args.queries, seed=1)) for size in args.sizes.split(",")))
    for vectors, queries in datasets:
        size = len(vectors)
        ids = [str(i) for i in range(size)]
        truth = None
        for kind in args.kinds.split(","):
            params = {"recall_sample": 100} if kind != "flat" else {}
            index = VectorIndex.build(ids, vectors, kind=kind, **params)
            latencies = []
            found = []
            for q in queries:
                start = time.perf_counter()
                hits = index.search(q, 10)[0]
                latencies.append((time.perf_counter() - start) * 1000)
                found.append({d for d, _ in hits})
            if kind == "flat":
                truth = found
            recall = None if truth is None else float(np.mean([len(f & t) / 10 for f, t in zip(found, truth)]))
            row = {
                "size": size, "kind": kind, "build_seconds": round(index.stats.build_seconds, 3),
                "memory_mb": round(index.stats.memory_bytes / 2**20, 1),
                "p50_ms": round(float(np.percentile(latencies, 50)), 3), "p99_ms": round(float(np.percentile(latencies, 99)), 3),
                "recall_at_10_vs_flat": None if recall is None else round(recall, 4),
                "recall_at_10_at_build": index.stats.recall_at_10, "extra": index.stats.extra,
            }
            print(row)
            results.append(row)
            if recall is not None and kind != "flat":
                flat = next(r for r in results if r["size"] == size and r["kind"] == "flat")
                flat_p50 = flat["p50_ms"]
                checks[f"{kind}_{size}"] = {"recall_at_10": round(recall, 4),
                                            "speedup_p50_vs_flat": round(flat_p50 / row["p50_ms"], 1),
                                            "memory_vs_flat": round(row["memory_mb"] / flat["memory_mb"], 3)}
                print(f"info {kind} at {size}: recall@10 {recall:.3f}, p50 {flat_p50 / row['p50_ms']:.1f}x faster than flat")
            del index
    write_result(args.name or ("index_search_real" if args.real_index else "index_search"),
                 {"dim": DIM, "queries": args.queries, "data": args.real_index or "random unit vectors",
                  "results": results, "checks": checks})


if __name__ == "__main__":
    main()
