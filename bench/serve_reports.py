"""Full-report serving latency: a tracker asking for a new report's duplicates, as it files it.

The service is the OpenOffice system that configs/pipelines/tracker_system.yaml registers (bench/tracker_online.py's
job: its newest pipeline run under --out, or --pipeline-run; without one the job runs first, about 15 minutes),
served by `lmp serve run` with `encoder.backend: auto` over an index of all 4,548 OpenOffice reports with their
metadata (product, component, created), as a deployed finder holds them.

Two query mixes, each sent in dense, hybrid and metadata mode:
  - report: the test split's duplicate reports as filed, title and description whole (up to 96,000 characters;
    the encoder reads the first 128 tokens) with their metadata, one `POST /v1/duplicates` each (k=10, the report's
    own id excluded), which is what a tracker sends;
  - title: the same reports' titles alone through `POST /v1/search` (metadata attached): the short queries the
    other serving benches send.
At each concurrency (1 and 8) the modes alternate in rounds, so a change of load on a shared machine hits all alike.
Each ingress (Serve's proxy, and HAProxy: the one docs/serving.md recommends) is a fresh `lmp serve run`.

Where a request's time goes, in this process, one report at a time with one thread: the tokenizer alone on the
whole report, and the encoder (on the path `auto` chose for the service, read from the same cache) with it;
and per ingress, GET /healthz (the HTTP path with no model call).

Target: the full-report p50 at concurrency 1 <= 50 ms through HAProxy, in every mode.

    python bench/serve_reports.py [--data ../shared/data] [--pipeline-run FOLDER] [--ingress proxy,haproxy]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, lmp_serve, write_result
from serve_load import one_at_a_time, percentiles, route_only, send
from tracker_online import import_export, registered_system, run_job, served_document, write_served_index

ROOT = Path(__file__).resolve().parents[1]
MODES = ("dense", "hybrid", "metadata")
TARGET_MS = 50.0
TARGET_INGRESS = "haproxy"


def system_folder(out: Path, data: Path, pipeline_run: Optional[Path]) -> Path:
    """The tracker_system pipeline run to serve: the one named, else the newest under `out`, else a new one."""
    if pipeline_run is not None:
        return pipeline_run.resolve()
    runs = sorted((out / "pipelines").glob("tracker_system-*"), key=lambda p: p.stat().st_mtime)
    if runs and (runs[-1] / "pipeline_state.json").is_file():
        return runs[-1]
    import_export(data, out / "data")
    return run_job(out / "data", out, f"sqlite:///{out / 'mlflow.db'}", toy=False)


def system_arguments(doc: Optional[str]) -> argparse.ArgumentParser:
    """A bench's parser with the options that find the served system: --data, --out, --pipeline-run."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "tracker_online",
                        help="bench/tracker_online.py's folder: its imported data, MLflow and pipeline runs.")
    parser.add_argument("--pipeline-run", type=Path, default=None, help="A tracker_system pipeline run folder.")
    return parser


def served_system(out: Path, data: Path, pipeline_run: Optional[Path]
                  ) -> tuple[Path, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(the pipeline run, its registered system, every imported report, the test split's duplicates as queries)."""
    folder = system_folder(out, data, pipeline_run)
    if not (out / "data" / "reports.jsonl").is_file():
        import_export(data, out / "data")
    return (folder, registered_system(folder), *reports_and_queries(out / "data"))


def reports_and_queries(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(every report as the service stores it, the test split's duplicates as a tracker files them)."""
    reports = [served_document(json.loads(line)) for line in (root / "reports.jsonl").open(encoding="utf-8")]
    by_id = {r["id"]: r for r in reports}
    pairs = [json.loads(line) for line in (root / "pairs.jsonl").open(encoding="utf-8")]
    wanted = dict.fromkeys(p["duplicate_id"] for p in pairs if p["split"] == "test")
    return reports, [by_id[d] for d in wanted if d in by_id]


def bodies(queries: list[dict[str, Any]], kind: str, mode: str) -> list[dict[str, Any]]:
    if kind == "report":
        return [{"report": {k: q[k] for k in ("id", "title", "text", "metadata")}, "k": 10, "mode": mode}
                for q in queries]
    return [{"query": q["title"] or q["text"][:200], "k": 10, "mode": mode, "metadata": q["metadata"]} for q in queries]


ROUTES = {"report": "/v1/duplicates", "title": "/v1/search"}


def measure(url: str, queries: list[dict[str, Any]], concurrency: int, requests: int, rounds: int,
            kinds: Sequence[str] = tuple(ROUTES)) -> dict[str, Any]:
    """Per query kind and mode: latency percentiles and requests/s of `requests` requests, the modes alternating."""
    results: dict[str, Any] = {}
    per_round = requests // rounds
    for kind in kinds:
        route = ROUTES[kind]
        latencies: dict[str, list[float]] = {m: [] for m in MODES}
        failed, wall = dict.fromkeys(MODES, 0), dict.fromkeys(MODES, 0.0)
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                chosen = [queries[(r * per_round + n) % len(queries)] for n in range(per_round)]
                times, failures, seconds = asyncio.run(send(url, bodies(chosen, kind, mode), concurrency,
                                                            warm_up=5 if r == 0 else 0, route=route))
                latencies[mode] += times
                failed[mode] += failures
                wall[mode] += seconds
        results[kind] = {m: {"requests": len(latencies[m]), "failed": failed[m],
                             "requests_per_s": round(len(latencies[m]) / wall[m], 2), **percentiles(latencies[m])}
                         for m in MODES}
        print(f"[bench] c={concurrency} {kind}: " + ", ".join(f"{m} p50 {results[kind][m]['p50_ms']:.1f} ms" for m in MODES),
              flush=True)
    return results


def in_process(model_dir: str, reports: list[dict[str, Any]], queries: list[dict[str, Any]], cache: Path) -> dict[str, Any]:
    """One report at a time, one thread: the tokenizer on the whole report (as before `models/long_texts`) and on
    the head the encoder reads, and tokenizer + encoder on the path `auto` chose for the service (the same cache;
    timed here only if the service's host key differs). The same two tokenizer calls on the corpus's longest report."""
    import torch

    from lmplatform.data import join_fields
    from lmplatform.models import choose_path, encoder_heads

    torch.set_num_threads(1)
    choice, encoder = choose_path(Path(model_dir), cache=cache)
    tokenizer, length = encoder.tokenizer, encoder.max_seq_length

    def tokenize_whole(text: str) -> Any:
        return tokenizer([text], truncation=True, max_length=length)

    def tokenize_head(text: str) -> Any:
        return tokenizer(encoder_heads(tokenizer, [text], length), truncation=True, max_length=length)

    texts = [join_fields(q, ["title", "text"]) for q in queries]
    total = min(200, len(texts))
    longest = max((join_fields(r, ["title", "text"]) for r in reports), key=len)
    return {"path": choice.summary(), "report_chars": {f"p{q}": int(np.percentile([len(t) for t in texts], q))
                                                       for q in (50, 99, 100)},
            "tokenize_whole": one_at_a_time(lambda n: tokenize_whole(texts[n % len(texts)]), total),
            "tokenize_head": one_at_a_time(lambda n: tokenize_head(texts[n % len(texts)]), total),
            "tokenize_and_encode": one_at_a_time(lambda n: encoder.encode([texts[n % len(texts)]]), total),
            "longest_report": {"chars": len(longest),
                               "tokenize_whole": one_at_a_time(lambda n: tokenize_whole(longest), 10),
                               "tokenize_head": one_at_a_time(lambda n: tokenize_head(longest), 10)}}


def main(argv: Optional[list[str]] = None) -> None:
    parser = system_arguments(__doc__)
    parser.add_argument("--ingress", default="proxy,haproxy", help="Comma-separated: proxy, haproxy.")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", type=int, default=200, help="Requests per query kind, mode and concurrency.")
    parser.add_argument("--rounds", type=int, default=4, help="Alternations of the modes per level.")
    parser.add_argument("--port", type=int, default=8767)
    parser.add_argument("--name", default="serve_reports", help="Result file bench/results/<name>.json.")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    folder, system, reports, queries = served_system(out, args.data, args.pipeline_run)
    index = out / "reports-index" / folder.name
    if not (index / "index.faiss").is_file():
        write_served_index(reports, system["model_dir"], index)
    print(f"[bench] {len(reports)} reports indexed; {len(queries)} test-split reports as queries; system "
          f"{system['model_uri']} from {folder.name}", flush=True)
    cache = out / "serve-cache"
    served: dict[str, Any] = {}
    for ingress in args.ingress.split(","):
        settings = ["encoder.backend=auto", f"cache_dir={cache}"]
        with lmp_serve(system["model_uri"], f"sqlite:///{out / 'mlflow.db'}", index, args.port, settings,
                       ingress=ingress) as url:
            import httpx

            model = httpx.get(f"{url}/v1/model", timeout=900).json()  # the first call waits for auto's timing
            route = route_only(url, args.requests)
            served[ingress] = {"encoder_choice": model["encoder_choice"], "search": model["search"], "healthz": route}
            print(f"[bench] {ingress}: encoder {model['encoder_choice']}; /healthz p50 {route['p50_ms']} ms", flush=True)
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                served[ingress][f"c{concurrency}"] = measure(url, queries, concurrency, args.requests, args.rounds)
    local = in_process(system["model_dir"], reports, queries, cache / "encode_paths.json")
    print(f"[bench] in process: {json.dumps(local)}", flush=True)
    checks = {}
    if TARGET_INGRESS in served and "c1" in served[TARGET_INGRESS]:
        for mode in MODES:
            checks[f"report_p50_c1_{mode}_{TARGET_INGRESS}_ms"] = check(
                f"{TARGET_INGRESS}, full report, {mode}: p50 ms at c=1",
                served[TARGET_INGRESS]["c1"]["report"][mode]["p50_ms"], TARGET_MS, higher_is_better=False)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_result(args.name, {"config": config, "system": {"model_uri": system["model_uri"], "pipeline_run": folder.name},
                             "documents": len(reports), "queries": len(queries), "in_process": local, "serve": served,
                             "checks": checks})


if __name__ == "__main__":
    main()
