"""Encode a corpus on Ray actors into parquet shards of (id, vector), then build and save a FAISS index.

    python ray_jobs/build_index.py --corpus data/demo/reports.jsonl --out runs/index/demo \
        [--model default|FOLDER|models:/name@alias] [--fields title,text] [--actors 2] [--kind flat|hnsw|ivf|ivfpq|auto]
    ray job submit --runtime-env ray_jobs/runtime_env.yaml --working-dir . -- python ray_jobs/build_index.py ...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, nargs="+", help="JSONL or parquet file(s) with an id and text fields.")
    parser.add_argument("--out", required=True, help="Output folder: shards/ (parquet) and index/ (FAISS).")
    parser.add_argument("--model", default="default")
    parser.add_argument("--fields", default="title,text", help="Text fields joined with '. '.")
    parser.add_argument("--id-field", default="id")
    parser.add_argument("--actors", type=int, default=1, help="Encoder actors (each holds the model).")
    parser.add_argument("--cpus-per-actor", type=float, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--quantize", choices=["int8"], default=None)
    parser.add_argument("--kind", default="auto", choices=["flat", "hnsw", "ivf", "ivfpq", "auto"])
    parser.add_argument("--address", default=None, help="Ray address (default: $RAY_ADDRESS, else a local Ray).")
    args = parser.parse_args(argv)

    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.retrieval.build import build_index_from_shards, encode_corpus_to_shards
    from lmplatform.retrieval.index import IndexParams

    out = Path(args.out)
    ensure_ray(args.address)
    stats = encode_corpus_to_shards(
        args.corpus, out / "shards", model=args.model, text_fields=args.fields.split(","), id_field=args.id_field,
        actors=args.actors, cpus_per_actor=args.cpus_per_actor, batch_size=args.batch_size, quantize=args.quantize,
    )
    index = build_index_from_shards(out / "shards", out / "index", IndexParams(kind=args.kind))
    print(json.dumps({
        "rows": stats.rows, "encode_seconds": round(stats.seconds, 2), "rows_per_second": round(stats.rows_per_second, 1),
        "shards": stats.shards, "index": str(out / "index"), "kind": index.kind,
        "build_seconds": round(index.stats.build_seconds, 3), "memory_bytes": index.stats.memory_bytes,
        "recall_at_10": index.stats.recall_at_10,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
