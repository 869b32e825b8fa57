"""Encode a corpus on Ray actors into parquet shards of (id, vector), then build and save a FAISS index.

    python ray_jobs/build_index.py --corpus data/demo/reports.jsonl --out runs/index/demo \
        [--model default|FOLDER|models:/name@alias] [--fields title,text] [--actors 2] [--kind flat|flat_fp16|hnsw|ivf|ivfpq|auto]
        [--label-field component] [--metadata-fields product,component,created] [--no-bm25] [--log-to-run auto|RUN_ID]

The index folder also gets documents.jsonl (id, title, text, label, metadata), the
document store the serving app shows hits from and a metadata fusion (/v1/search mode
"metadata") reads, and bm25/ (unless --no-bm25), the BM25 index of the texts the vectors
were made from, which hybrid search (/v1/search mode "hybrid") fuses with them.
`--log-to-run auto` logs the folder as the `index` artifact of the
--model version's MLflow run, where `lmp serve` finds it.
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- "$PWD/.venv/bin/python" ray_jobs/build_index.py ...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing


def main(argv: list[str] | None = None) -> int:
    from lmplatform.retrieval.settings import INDEX_KINDS

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
    parser.add_argument("--backend", choices=["torch", "onnx", "openvino", "auto"], default="torch",
                        help="'auto': the fastest path on each encoder actor's host, timed once and cached "
                             "(as the serve setting encoder.backend auto; no --quantize beside it).")
    parser.add_argument("--kind", default="auto", choices=INDEX_KINDS)
    parser.add_argument("--label-field", default=None, help="Field copied as the document label (KNN classification).")
    parser.add_argument("--metadata-fields", default="",
                        help="Fields kept as each document's metadata (what a metadata fusion matches on), comma-separated.")
    parser.add_argument("--no-bm25", action="store_true", help="Skip the BM25 index (hybrid search is then refused).")
    parser.add_argument("--log-to-run", default=None, help="'auto' (the run of a models:/ --model) or a run id.")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--address", default=None, help="Ray address (default: $RAY_ADDRESS, else a local Ray).")
    args = parser.parse_args(argv)
    if args.backend == "auto" and args.quantize:
        parser.error("--quantize: --backend auto chooses the quantization itself")

    from lmplatform.ray_runtime import ensure_ray
    from lmplatform.retrieval.build import build_index_folder
    from lmplatform.retrieval.index import IndexParams
    from lmplatform.serving.release import publish_index

    out = Path(args.out)
    ensure_ray(args.address)
    built = build_index_folder(args.corpus, out, args.model, args.fields.split(","), args.id_field, args.actors,
                               args.cpus_per_actor, args.batch_size, args.quantize, IndexParams(kind=args.kind),
                               bm25=not args.no_bm25, label_field=args.label_field,
                               metadata_fields=[f for f in args.metadata_fields.split(",") if f], backend=args.backend)
    stats, index = built.encode, built.index
    run_id = None
    if args.log_to_run:
        target = args.model if args.log_to_run == "auto" else args.log_to_run
        if not target.startswith("models:/") and args.log_to_run == "auto":
            parser.error("--log-to-run auto needs --model models:/<name>@<alias> (or pass a run id)")
        run_id = publish_index(out / "index", target, args.tracking_uri)
    print(json.dumps({
        "rows": stats.rows, "encode_seconds": round(stats.seconds, 2), "rows_per_second": round(stats.rows_per_second, 1),
        "shards": stats.shards, "index": str(out / "index"), "kind": index.kind,
        "build_seconds": round(index.stats.build_seconds, 3), "memory_bytes": index.stats.memory_bytes,
        "recall_at_10": index.stats.recall_at_10, "documents": built.documents, "bm25": built.bm25, "logged_to_run": run_id,
        "metadata": built.metadata,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
