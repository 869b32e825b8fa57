"""The document store a retriever replica holds, at tracker scale: resident memory and load time, beside plain JSON rows.

The store is what `build_index_folder` writes for bench/serve_scale.py's corpus (the 4,548 OpenOffice reports, then
synthetic reports recombined from them, up to each of --docs): id, title, text, and product, component and created
as metadata. Each (loader, size) runs in a fresh process, which reads its resident set, loads the store, and reads it
again:
- `store`: `DocumentStore.load`, what a replica runs;
- `json rows`: the reference, each line's `json.loads` kept in a dict by id, what a loader that keeps the rows as
  they decode would hold.

    python bench/store_scale.py [--docs 100000,1000000]
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

sys.path.insert(0, str(Path(__file__).parent))
from bm25_scale import resident_mb
from common import SHARED_DATA, check, write_result
from serve_reports import reports_and_queries
from serve_scale import synthetic_reports
from tracker_online import import_export

LOADERS = ("store", "json rows")


def write_store(root: Path, docs: int, path: Path) -> None:
    """serve_scale's corpus of `docs` reports as a document store file."""
    real, _ = reports_and_queries(root)
    extra = synthetic_reports(real, random.Random(11), "syn")
    with path.open("w", encoding="utf-8") as handle:
        for n in range(docs):
            doc = real[n] if n < len(real) else next(extra)
            handle.write(json.dumps({"id": doc["id"], "title": doc["title"], "text": doc["text"],
                                     "metadata": doc["metadata"]}, ensure_ascii=False) + "\n")


def measure_one(loader: str, path: Path) -> dict[str, Any]:
    from lmplatform.retrieval import DocumentStore

    gc.collect()
    before = resident_mb()
    start = time.perf_counter()
    if loader == "store":
        held: Any = DocumentStore.load(path)
    else:
        held = {}
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                held[row["id"]] = row
    seconds = time.perf_counter() - start
    gc.collect()
    return {"loader": loader, "documents": len(held), "memory_mb": round(resident_mb() - before, 1),
            "load_seconds": round(seconds, 1)}


def run_child(loader: str, path: Path) -> dict[str, Any]:
    print(f"[bench] {loader}: {path.name}", flush=True)
    done = subprocess.run([sys.executable, __file__, "--child", loader, "--store", str(path)], check=True,
                          capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"[bench] {result}", flush=True)
    return result


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--out", type=Path, default=Path("runs/store_scale"))
    parser.add_argument("--docs", default="100000,1000000")
    parser.add_argument("--child", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child, args.store)))
        return
    out = args.out.resolve()
    root = out / "data"
    if not (root / "reports.jsonl").is_file():
        import_export(args.data, root)
    rows, checks = [], {}
    for docs in (int(d) for d in args.docs.split(",")):
        path = out / f"documents_{docs}.jsonl"
        if not path.is_file():
            write_store(root, docs, path)
        measured = {loader: run_child(loader, path) for loader in LOADERS}
        ratio = round(measured["store"]["memory_mb"] / measured["json rows"]["memory_mb"], 2)
        rows.append({"documents": docs, "file_mb": round(path.stat().st_size / 1e6, 1), **measured,
                     "memory_ratio": ratio})
        checks[f"memory_ratio_{docs}"] = check(f"store memory against JSON rows at {docs:,}", ratio, 1.0,
                                               higher_is_better=False)
    write_result("store_scale", {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                                            if k not in ("child", "store")}, "rows": rows, "checks": checks})


if __name__ == "__main__":
    main()
