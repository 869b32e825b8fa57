"""Two trackers the project has never seen, each from its raw export to a served duplicate finder with one command,
and scored in the online protocol through HTTP.

The exports: OpenOffice's reports, cut in two trackers by product and written as those trackers export them.
  - writer, a Jira CSV export: the Writer product's reports. `Created` in Jira's `dd/MMM/yy HH:mm`, components in
    repeated `Component/s` columns, descriptions over several lines, and each duplicate link twice, as Jira writes
    it: an `Outward issue link (Duplicate)` on the duplicate and an `Inward issue link (Duplicate)` on its master.
  - suite, a Bugzilla REST JSON export: every other product's bugs (`creation_time` in ISO 8601, `dupe_of` on each
    duplicate), with the descriptions apart, as comment 0 of a comments file (/rest/bug/<id>/comment).
A link between the two trackers is dropped by the import, which counts it in its summary.

Per tracker, the one command a user types (its own embedded Ray; MLflow in sqlite under --out):

    lmp pipeline tracker --format jira-csv --input export.csv --name writer --port 8771 --serve-set limits.max_k=1000

It imports (time split: the oldest 60% of duplicates train, the next 20% dev, the newest 20% test), runs
configs/pipelines/tracker_system.yaml, registers the system and serves it. Once it serves, every test query (the
newest period's duplicates) goes to `POST /v1/duplicates` in filing order with its metadata, its id (excluded
from its hits) and `window_days: 365`: the service holds every report, and the window admits only those filed in
the 365 days up to the query's own time, so a query meets exactly the protocol's candidates (a report filed at the
same moment but later in order aside: the scoring drops it). K=1,000 hits, scored as bench/tracker_online.py
scores (`evaluation.online`: RR@k and MRR@10 with 95% bootstrap intervals), beside BM25F tuned on dev and REP on
the same import, with the paired gains.

    python bench/tracker_exports.py [--data ../shared/data] [--toy]

Writes bench/results/tracker_exports.json (tracker_exports_toy.json with --toy: a few hundred reports and steps,
checks the script, measures nothing).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import textwrap
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, serving, write_result
from tracker_online import HEADLINE, KS, METRICS, Data, bm25f_rows, evaluate, hits_scorer, rep_row, summarise_window

ROOT = Path(__file__).resolve().parents[1]
WINDOW_DAYS = 365.0
K = 1000
TOY_OVERRIDES = ["stages.biencoder.run.optim.max_steps=3", "stages.negatives.mine.distractors.max_documents=200",
                 "stages.biencoder.run.retrieval_validation.distractors.max_documents=100",
                 "stages.system.system.select.distractors.max_documents=200",
                 "stages.system.system.metadata.fit.distractors.max_documents=200"]


# -- the exports --------------------------------------------------------------------------------------------
def openoffice(data: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    folder = data / "duplicate_bug_reports" / "openoffice"
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        reports = [json.loads(line) for line in handle if line.strip()]
    with (folder / "pairs.jsonl").open(encoding="utf-8") as handle:
        pairs = [(row["duplicate_id"], row["master_id"]) for row in map(json.loads, handle) if row]
    return reports, pairs


def _moment(report: dict[str, Any]) -> datetime:
    return datetime.strptime(report["created"], "%Y-%m-%d %H:%M:%S %z")


def _limited(reports: list[dict[str, Any]], limit: Optional[int]) -> list[dict[str, Any]]:
    """The newest `limit` reports (all with None): the toy run keeps the period its test split reads."""
    return reports if limit is None else sorted(reports, key=_moment)[-limit:]


def write_jira_csv(reports: list[dict[str, Any]], pairs: list[tuple[str, str]], path: Path) -> Path:
    """Jira's CSV export of `reports`: key WRITER-<id>, one link column per link, as many as the most a row has."""
    key = {r["id"]: f"WRITER-{r['id']}" for r in reports}
    outward, inward = defaultdict(list), defaultdict(list)
    for duplicate, master in pairs:
        if duplicate in key:  # a link to another tracker's report stays: the import drops and counts it
            outward[duplicate].append(f"WRITER-{master}")
        if master in key and duplicate in key:
            inward[master].append(key[duplicate])
    n_out = max((len(v) for v in outward.values()), default=1)
    n_in = max((len(v) for v in inward.values()), default=1)
    header = (["Summary", "Issue key", "Issue id", "Issue Type", "Status", "Project key", "Project name", "Priority",
               "Resolution", "Created", "Component/s", "Component/s", "Description"]
              + ["Outward issue link (Duplicate)"] * n_out + ["Inward issue link (Duplicate)"] * n_in)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for report in reports:
        links_out = (outward[report["id"]] + [""] * n_out)[:n_out]
        links_in = (inward[report["id"]] + [""] * n_in)[:n_in]
        writer.writerow([report["title"], key[report["id"]], report["id"], "Bug", "Closed", "WRITER", report["product"],
                         report.get("priority") or "", "Duplicate" if outward[report["id"]] else "Fixed",
                         _moment(report).strftime("%d/%b/%y %H:%M"), report.get("component") or "", "",
                         "\n".join(textwrap.wrap(report.get("description") or "", 100)),
                         *links_out, *links_in])
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def write_bugzilla_json(reports: list[dict[str, Any]], pairs: list[tuple[str, str]], folder: Path) -> list[Path]:
    """Bugzilla's REST JSON: bugs.json ({"bugs": [...]}, no descriptions) and comments.json (comment 0 of each)."""
    master_of = dict(pairs)
    bugs = [{"id": int(r["id"]), "summary": r["title"], "product": r["product"], "component": r.get("component"),
             "priority": r.get("priority"), "severity": r.get("severity"), "version": "unspecified",
             "creation_time": _moment(r).strftime("%Y-%m-%dT%H:%M:%SZ"), "status": "RESOLVED",
             "resolution": "DUPLICATE" if r["id"] in master_of else "FIXED",
             "dupe_of": int(master_of[r["id"]]) if r["id"] in master_of else None, "keywords": [], "alias": None}
            for r in reports]
    comments = {r["id"]: {"comments": [{"id": 1, "count": 0, "text": r.get("description") or "",
                                        "creation_time": _moment(r).strftime("%Y-%m-%dT%H:%M:%SZ")}]} for r in reports}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bugs.json").write_text(json.dumps({"bugs": bugs}), encoding="utf-8")
    (folder / "comments.json").write_text(json.dumps({"bugs": comments}), encoding="utf-8")
    return [folder / "bugs.json", folder / "comments.json"]


def exports(data: Path, out: Path, limit: Optional[int]) -> dict[str, tuple[str, list[Path]]]:
    """{tracker: (format, input files)}: the two trackers' exports, written under `out`."""
    reports, pairs = openoffice(data)
    writer = _limited([r for r in reports if r["product"] == "Writer"], limit)
    suite = _limited([r for r in reports if r["product"] != "Writer"], limit)
    out.mkdir(parents=True, exist_ok=True)
    return {"writer": ("jira-csv", [write_jira_csv(writer, pairs, out / "writer.csv")]),
            "suite": ("bugzilla-json", write_bugzilla_json(suite, pairs, out / "suite"))}


# -- one tracker --------------------------------------------------------------------------------------------
def served_queries(url: str, data: Data, name: str) -> tuple[dict[int, list[str]], dict[str, Any]]:
    """Every test query through /v1/duplicates in filing order, in the 365 days up to it: its hit ids, and the
    version that answered with the requests' p50/p99 latency."""
    import httpx

    hits: dict[int, list[str]] = {}
    seconds: list[float] = []
    with httpx.Client(base_url=url, timeout=120) as client:
        model = client.get("/v1/model").json()
        if model.get("registered_name") != name:
            raise SystemExit(f"the service on {url} serves {model.get('registered_name')!r}, not {name!r}")
        order = {int(q): n for n, q in enumerate(data.timeline.order)}
        for q in sorted(data.test, key=order.__getitem__):
            report = data.reports[q]
            metadata = {f: report[f] for f in ("product", "component", "created") if report.get(f) not in (None, "")}
            body = {"report": {"id": report["id"], "title": report.get("title") or "",
                               "text": report.get("description") or report.get("title") or "", "metadata": metadata},
                    "k": K, "window_days": WINDOW_DAYS}
            start = time.perf_counter()
            response = client.post("/v1/duplicates", json=body)
            seconds.append(time.perf_counter() - start)
            response.raise_for_status()
            hits[int(q)] = [hit["id"] for hit in response.json()["hits"]]
    return hits, {"model": f"models:/{name}/{model['version']}", "search": model.get("search"),
                  "p50_ms": float(np.percentile(seconds, 50) * 1000), "p99_ms": float(np.percentile(seconds, 99) * 1000)}


def served_report(data: Data, hits: dict[int, list[str]]) -> Any:
    return evaluate(data, data.test, hits_scorer(data, hits, K), {"365 days": WINDOW_DAYS})["365 days"]


def run_tracker(name: str, fmt: str, inputs: list[Path], out: Path, port: int, toy: bool) -> dict[str, Any]:
    """The one command for one tracker, its served system scored, and BM25F and REP on the same import."""
    folder = out / name
    data_root = folder / "data"
    command = ["pipeline", "tracker", "--format", fmt, "--name", name, "--data-out", str(data_root), "--port", str(port),
               "--set", f"tracking.tracking_uri=sqlite:///{folder / 'mlflow.db'}",
               "--set", f"storage_path={folder / 'pipelines'}", "--serve-set", f"limits.max_k={K}"]
    for path in inputs:
        command += ["--input", str(path)]
    for override in TOY_OVERRIDES if toy else []:
        command += ["--set", override]
    print(f"[bench] {name}: lmp {' '.join(command)}", flush=True)
    start = time.perf_counter()
    with serving(command, port, wait_s=3600) as url:
        job_seconds = time.perf_counter() - start
        print(f"[bench] {name}: serving after {job_seconds:.0f} s", flush=True)
        data = Data(data_root, None)
        hits, served = served_queries(url, data, name)
    summary = json.loads((data_root / "import_summary.json").read_text())
    print(f"[bench] {name}: {len(data.timeline)} reports, {len(data.test)} test queries", flush=True)
    rows: dict[str, Any] = {}
    bm25f, bm25f_info = bm25f_rows(data)
    rows["BM25F (tuned on dev)"] = bm25f["BM25F (tuned on dev)"]["365 days"]
    rep, rep_info = rep_row(data)
    rows["REP"] = rep["365 days"]
    rows["served system"] = served_report(data, hits)
    table = summarise_window(rows)
    for row, cells in table.items():
        print(f"[bench] {name}: {row:22s} " + " ".join(f"{m} {cells['metrics'][m]['value']:.3f}" for m in METRICS),
              flush=True)
    imported = {k: summary[k] for k in ("records", "links", "groups", "pairs", "dates")}
    return {"format": fmt, "job_seconds": job_seconds, "test_queries": len(data.test), "answered": len(hits),
            "import": imported, "served": served, "bm25f": bm25f_info, "rep": rep_info, "rows": table}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "tracker_exports")
    parser.add_argument("--port", type=int, default=8771)
    parser.add_argument("--toy", action="store_true", help="A few hundred reports and steps: checks the script.")
    args = parser.parse_args(argv)
    out = args.out.resolve() / ("toy" if args.toy else "")
    trackers = exports(args.data, out / "exports", 400 if args.toy else None)
    results = {name: run_tracker(name, fmt, inputs, out, args.port, args.toy) for name, (fmt, inputs) in trackers.items()}
    met = {f"{name}_served_by_one_command_every_test_query_answered_over_http": r["answered"] == r["test_queries"] > 0
           for name, r in results.items()}
    for name, ok in met.items():
        print(f"{'PASS' if ok else 'MISS'} {name}", flush=True)
    write_result("tracker_exports" + ("_toy" if args.toy else ""), {
        "protocol": {"window_days": WINDOW_DAYS, "queries": "test split duplicates (newest period)", "ks": list(KS),
                     "hits_per_request": K, "headline": list(HEADLINE)},
        "trackers": results, "targets": met})


if __name__ == "__main__":
    main()
