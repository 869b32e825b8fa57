"""Duplicate detection as the field measures it: OpenOffice in the online protocol, the served system beside REP,
BM25F, zero-shot MiniLM and the sentence-transformers trainer, all on the same data in one run.

The job a new user runs, timed: `lmp data import` of the raw export (reports + duplicate links; time split: the
oldest 60% of duplicates train, the next 20% dev, the newest 20% test), then configs/pipelines/tracker_system.yaml
on that data root (it trains, chooses on dev and registers the system with its index and search settings).

The protocol (`lmplatform.evaluation.online`, Sun et al. 2011): the queries are the test split's duplicates (the
newest period); each is ranked against the reports filed before it within 365 days, grouped into buckets (a master
with its earlier duplicates); a query's relevant bucket holds its group's earlier members. RR@k (recall rate @k) and
MRR@10 over queries, each with a 95% bootstrap interval, and each row's paired gain over REP and over BM25F.

Rows:
  - BM25F (title, description) with default parameters, and with k1 and per-field weight and b tuned on dev;
  - REP (Sun et al. 2011; `lmplatform.retrieval.rep`): BM25F_ext over unigrams and bigrams plus product,
    component, type, priority and version features, its 19 parameters learned by RankNet on triples of the train
    pairs with irrelevant reports filed up to the end of the train period;
  - zero-shot MiniLM and the sentence-transformers trainer (MultipleNegativesRankingLoss on the train pairs at the
    recipe's budget), each dense over title + description;
  - the system's bi-encoder, dense, scored here;
  - the served system: `lmp serve run` with the registered version over a live index of the reports filed before
    the test period. The test period is then replayed in filing order over HTTP: every test query is one
    `POST /v1/duplicates` per mode and window (its own id excluded; `window_days: 365`, and none), and the last
    one adds it (`add: true`); every other report is upserted with `POST /v1/documents`. So each query meets
    exactly the reports filed before it, as a deployed finder would, and the service searches only its window.
    Modes: dense, hybrid, metadata, and as registered. A request asks for K=1,000 hits; a relevant bucket outside
    them ranks behind every candidate bucket in them, so RR@k and MRR@10 are exact while 20 candidate buckets come
    back (reported: `served_short_lists`, windowed queries with fewer).
Every row is scored in the 365-day window (the targets) and without one.
BM25F's and REP's document statistics are the whole corpus's (as the literature's re-implementations index it);
the served BM25 knows only the reports filed so far.

    python bench/tracker_online.py [--data ../shared/data] [--pipeline-run FOLDER] [--toy]

--pipeline-run scores a tracker_system pipeline run this bench made earlier (its folder under --out/pipelines)
instead of running the job again; the pipeline's time is then that run's (its MLflow run's start to end).
Writes bench/results/tracker_online.json (tracker_online_toy.json with --toy).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, lmp_serve, write_result
from openoffice_retrieval import BUDGET, train_peer

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "configs" / "pipelines" / "tracker_system.yaml"
REGISTERED = "openoffice-online"
KS = (1, 5, 10, 20)
HEADLINE = ("rr@10", "mrr@10")
METRICS = ("rr@1", "rr@5", "rr@10", "rr@20", "mrr@10")
WINDOW_DAYS = 365.0
# The protocol's window, which the targets read, and none: on this subset (4,548 reports over 13 years) a third of
# the test queries' earlier duplicates lie more than 365 days back, misses for every row.
WINDOWS: dict[str, Optional[float]] = {"365 days": WINDOW_DAYS, "no window": None}
K = 1000  # hits per served request (limits.max_k): deep enough to hold 20 candidate buckets of the protocol
METADATA_FIELDS = ("product", "component", "created")
SERVED_MODES = {"dense": {"mode": "dense"}, "hybrid": {"mode": "hybrid"}, "metadata": {"mode": "metadata"},
                "as registered": {}}
BM25F_GRID = {"k1": [0.8, 1.2, 1.6, 2.0], "weight:title": [1.0, 2.0, 3.0, 5.0, 8.0], "weight:description": [0.25, 0.5, 1.0],
              "b:title": [0.3, 0.5, 0.75, 1.0], "b:description": [0.3, 0.5, 0.75, 1.0]}


# -- the job ------------------------------------------------------------------------------------------------
def import_export(data: Path, out: Path) -> dict[str, Any]:
    from lmplatform.data import TrackerImportConfig, import_tracker

    oo = data / "duplicate_bug_reports" / "openoffice"
    start = time.perf_counter()
    summary = import_tracker(TrackerImportConfig(format="jsonl", inputs=[str(oo / "corpus.jsonl")],
                                                 links=[str(oo / "pairs.jsonl")], out=str(out)))
    for line in summary.lines():
        print(f"[bench] {line}", flush=True)
    return {"seconds": time.perf_counter() - start, "summary": json.loads((out / "import_summary.json").read_text())}


def run_job(root: Path, out: Path, tracking_uri: str, toy: bool) -> Path:
    """configs/pipelines/tracker_system.yaml on the imported data root; the run's folder."""
    from lmplatform.pipeline import load_pipeline_config, run_pipeline

    overrides = [f"vars.data_root={root}", f"vars.registered_model={REGISTERED}",
                 f"tracking.tracking_uri={tracking_uri}", f"storage_path={out / 'pipelines'}"]
    if toy:  # a few steps and documents: checks the script, measures nothing
        overrides += ["stages.biencoder.run.optim.max_steps=3", "stages.negatives.mine.distractors.max_documents=200",
                      "stages.biencoder.run.retrieval_validation.distractors.max_documents=100",
                      "stages.system.system.select.distractors.max_documents=200",
                      "stages.system.system.metadata.fit.distractors.max_documents=200"]
    result = run_pipeline(load_pipeline_config(PIPELINE, overrides))
    return Path(result.folder)


def registered_system(folder: Path) -> dict[str, Any]:
    """The version the run registered, its local model folder and settings, and the run's wall time (its MLflow
    parent run's start to end)."""
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline import PipelineState

    state = PipelineState.load(folder)
    system = state.stages["system"]
    if system.model_version is None:
        raise SystemExit(f"{folder}: the system stage registered no version")
    run = MlflowClient(state.tracking_uri).get_run(state.parent_run_id).info
    return {"model_dir": system.model_dir, "model_uri": f"models:/{system.registered_model}/{system.model_version}",
            "search": system.search, "pipeline_seconds": (run.end_time - run.start_time) / 1000}


# -- the data -----------------------------------------------------------------------------------------------
class Data:
    """The imported reports on the protocol's timeline, the test and dev queries, the train pairs."""

    def __init__(self, root: Path, limit_queries: Optional[int]):
        from lmplatform.evaluation import split_queries, timeline_from_files

        self.reports_file, self.pairs_file = root / "reports.jsonl", root / "pairs.jsonl"
        self.timeline = timeline_from_files(self.reports_file, self.pairs_file)
        by_id = {r["id"]: r for r in _jsonl(self.reports_file)}
        self.reports = [by_id[doc_id] for doc_id in self.timeline.ids]
        self.test = split_queries(self.timeline, self.pairs_file, "test")[:limit_queries]
        self.dev = split_queries(self.timeline, self.pairs_file, "dev")[:limit_queries]
        pairs = _jsonl(self.pairs_file)
        self.train_pairs = [(p["duplicate_id"], p["master_id"]) for p in pairs if p["split"] == "train"]
        created = self.timeline.created
        train_end = max(created[self.timeline.indices([d for d, _ in self.train_pairs])])
        self.train_period_ids = [doc_id for doc_id, t in zip(self.timeline.ids, created) if t <= train_end]
        self.test_start = float(min(created[self.test]))

    def texts(self) -> list[str]:
        from lmplatform.data import join_fields

        return [join_fields(r, ["title", "description"]) for r in self.reports]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# -- scoring ------------------------------------------------------------------------------------------------
def evaluate(data: Data, queries: list[int], score_one: Callable[[int], np.ndarray],
             windows: Optional[dict[str, Optional[float]]] = None) -> dict[str, Any]:
    """The protocol's report of `queries` under each window (default WINDOWS), each query scored once."""
    from lmplatform.evaluation import evaluate_online

    scores = {int(q): score_one(int(q)) for q in queries}
    return {label: evaluate_online(data.timeline, queries, lambda batch: np.stack([scores[int(q)] for q in batch]),
                                   ks=KS, window_days=days)
            for label, days in (WINDOWS if windows is None else windows).items()}


def bm25f_rows(data: Data) -> tuple[dict[str, Any], dict[str, Any]]:
    """BM25F with default parameters and tuned on dev (MRR@10): {row: report}, {row: params and seconds}."""
    from lmplatform.retrieval import BM25FIndex, BM25FParams, tune_bm25f

    fields = ["title", "description"]
    index = BM25FIndex(data.reports, fields)
    query = [{f: r.get(f) for f in fields} for r in data.reports]

    def report(params: BM25FParams, queries: list[int]) -> Any:
        return evaluate(data, queries, lambda q: index.scores(query[q], params), {"365 days": WINDOW_DAYS})["365 days"]

    default = BM25FParams().named(fields)
    start = time.perf_counter()
    tuned, dev_mrr = tune_bm25f(lambda p: report(p, data.dev).metrics["mrr@10"], default, BM25F_GRID)
    seconds = time.perf_counter() - start
    print(f"[bench] BM25F tuned on dev in {seconds:.0f} s: MRR@10 {dev_mrr:.3f}, {tuned.to_dict()}", flush=True)
    return ({"BM25F (default)": evaluate(data, data.test, lambda q: index.scores(query[q], default)),
             "BM25F (tuned on dev)": evaluate(data, data.test, lambda q: index.scores(query[q], tuned))},
            {"params": tuned.to_dict(), "dev_mrr_at_10": dev_mrr, "tuning_seconds": seconds})


def rep_row(data: Data) -> tuple[Any, dict[str, Any]]:
    """REP fitted on train triples: its test report, its learned weights and fitting time."""
    from lmplatform.retrieval import RepIndex, RepModel, training_triples

    index = RepIndex(data.reports)
    triples = training_triples(data.train_pairs, data.train_period_ids, negatives=20, seed=0)
    start = time.perf_counter()
    model = RepModel().fit(index, triples)
    seconds = time.perf_counter() - start
    print(f"[bench] REP fitted on {len(triples)} triples in {seconds:.0f} s", flush=True)
    return (evaluate(data, data.test, lambda q: model.score(data.reports[q], index)),
            {"model": model.to_dict(), "triples": len(triples), "fit_seconds": seconds})


def dense_row(data: Data, model: str, texts: list[str]) -> tuple[Any, float]:
    """A bi-encoder's cosine scores (title + description, cut at the budget's max length): its report, encode time."""
    from lmplatform import Encoder

    start = time.perf_counter()
    vectors = Encoder.from_pretrained(model, max_seq_length=BUDGET["max_seq_length"]).encode(texts, batch_size=64)
    seconds = time.perf_counter() - start
    return evaluate(data, data.test, lambda q: vectors @ vectors[q]), seconds


# -- the served replay --------------------------------------------------------------------------------------
def served_document(report: dict[str, Any]) -> dict[str, Any]:
    """A report as the service takes it: title, text (the description, else the title: text must not be empty)."""
    title, text = str(report.get("title") or "").strip(), str(report.get("description") or "").strip()
    return {"id": report["id"], "title": title if text else "", "text": text or title,
            "metadata": {f: report[f] for f in METADATA_FIELDS if report.get(f) not in (None, "")}}


def base_index(data: Data, model: str, folder: Path) -> tuple[Path, int]:
    """The index folder the service starts from: the reports filed before the test period."""
    documents = [served_document(r) for r, t in zip(data.reports, data.timeline.created) if t < data.test_start]
    return write_served_index(documents, model, folder), len(documents)


def write_served_index(documents: list[dict[str, Any]], model: str, folder: Path) -> Path:
    """An index folder of `documents` (served_document's), encoded with `model` as the live index encodes an upsert
    (title and text joined): flat FAISS, BM25 and the document store."""
    from lmplatform import Encoder
    from lmplatform.data import join_fields
    from lmplatform.retrieval import BM25_DIR, DOCUMENTS_FILE, BM25Retriever, VectorIndex

    texts = [join_fields(d, ["title", "text"]) for d in documents]
    ids = [d["id"] for d in documents]
    vectors = Encoder.from_pretrained(model, max_seq_length=BUDGET["max_seq_length"]).encode(texts, batch_size=64)
    folder.mkdir(parents=True, exist_ok=True)
    VectorIndex.build(ids, vectors, kind="flat").save(folder)
    bm25 = BM25Retriever()
    bm25.index(ids, texts)
    bm25.save(folder / BM25_DIR)
    with (folder / DOCUMENTS_FILE).open("w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps(document, ensure_ascii=False) + "\n")
    return folder


def replay(url: str, data: Data) -> dict[str, Any]:
    """The test period in filing order: queries through /v1/duplicates in every mode and under each window (the
    request's window_days; the last request adds the report), the other reports through /v1/documents.
    Per window and mode: hit ids per query; per mode, p50/p99 latency of the windowed requests."""
    import httpx

    queries = set(data.test)
    asks = [(label, mode, choice) for label in WINDOWS for mode, choice in SERVED_MODES.items()]
    hits: dict[str, dict[str, dict[int, list[str]]]] = {label: {mode: {} for mode in SERVED_MODES} for label in WINDOWS}
    latencies: dict[str, list[float]] = {mode: [] for mode in SERVED_MODES}
    pending: list[dict[str, Any]] = []
    replayed = [int(i) for i in data.timeline.order if data.timeline.created[i] >= data.test_start]
    with httpx.Client(base_url=url, timeout=120) as client:
        def flush() -> None:
            if pending:
                client.post("/v1/documents", json={"documents": pending}).raise_for_status()
                pending.clear()

        for n, position in enumerate(replayed):
            document = served_document(data.reports[position])
            if position not in queries:
                pending.append(document)
                if len(pending) == 32:
                    flush()
                continue
            flush()
            report = {k: document[k] for k in ("id", "title", "text", "metadata")}
            for i, (label, mode, choice) in enumerate(asks):
                window = {} if WINDOWS[label] is None else {"window_days": WINDOWS[label]}
                body = {"report": report, "k": K, **choice, **window, "add": i == len(asks) - 1}
                start = time.perf_counter()
                response = client.post("/v1/duplicates", json=body)
                if window:
                    latencies[mode].append(time.perf_counter() - start)
                response.raise_for_status()
                hits[label][mode][position] = [hit["id"] for hit in response.json()["hits"]]
            done = len(hits[label]["dense"])
            if done % 100 == 0:
                print(f"[bench] replay: {n + 1}/{len(replayed)} reports, {done} queries", flush=True)
        flush()
        live_seq = client.get("/v1/model").json().get("live_seq")
    return {"hits": hits, "replayed": len(replayed), "live_seq": live_seq,
            "latency": {m: {"p50_ms": float(np.percentile(v, 50) * 1000), "p99_ms": float(np.percentile(v, 99) * 1000)}
                        for m, v in latencies.items()}}


def hits_scorer(data: Data, by_query: dict[int, list[str]], depth: int = K) -> Callable[[int], np.ndarray]:
    """A query's scores over the timeline from the hit ids a service returned for it: falling with rank, -inf for
    every report it did not return (depth: hits asked for)."""
    position = {doc_id: i for i, doc_id in enumerate(data.timeline.ids)}

    def score_one(q: int) -> np.ndarray:
        scores = np.full(len(data.timeline), -np.inf)
        for rank, doc_id in enumerate(by_query[q]):
            scores[position[doc_id]] = depth - rank
        return scores
    return score_one


def served_rows(data: Data, replayed: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """Each mode's hit lists, under each window those its requests asked for, scored by the protocol: a hit's score
    falls with its rank; reports not returned -inf. Short lists: queries given fewer than 20 windowed buckets."""
    from lmplatform.evaluation import candidate_mask

    position = {doc_id: i for i, doc_id in enumerate(data.timeline.ids)}
    rows: dict[str, Any] = {}
    for mode in SERVED_MODES:
        rows[f"served system, {mode}"] = {
            label: evaluate(data, data.test, hits_scorer(data, replayed["hits"][label][mode]), {label: days})[label]
            for label, days in WINDOWS.items()}
    windowed = replayed["hits"]["365 days"]
    short = {mode: sum(len({data.timeline.bucket_of[position[d]] for d in ids
                            if candidate_mask(data.timeline, q, WINDOW_DAYS)[position[d]]}) < max(KS)
                       for q, ids in by_query.items())
             for mode, by_query in windowed.items()}
    return rows, short


# -- the table ----------------------------------------------------------------------------------------------
def summarise(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per window: each row's metrics with intervals, counts and paired gains over REP and tuned BM25F."""
    return {label: summarise_window({name: reports[label] for name, reports in rows.items()}) for label in WINDOWS}


def summarise_window(rows: dict[str, Any]) -> dict[str, Any]:
    from lmplatform.evaluation import metric_interval, paired_difference

    out = {}
    for name, report in rows.items():
        out[name] = {"metrics": {m: metric_interval(report, m).to_dict() for m in METRICS}, "counts": report.counts,
                     "vs": {}}
        for peer in ("REP", "BM25F (tuned on dev)"):
            if name != peer:
                out[name]["vs"][peer] = {m: paired_difference(report, rows[peer], m).to_dict() for m in HEADLINE}
    return out


def print_table(summary: dict[str, Any]) -> None:
    print(f"{'row':34s} " + " ".join(f"{m:>18s}" for m in METRICS), flush=True)
    for name, row in summary.items():
        cells = [f"{c['value']:.3f} [{c['low']:.3f},{c['high']:.3f}]" for c in (row["metrics"][m] for m in METRICS)]
        print(f"{name:34s} " + " ".join(f"{c:>18s}" for c in cells), flush=True)


def targets(summary: dict[str, Any], job_seconds: Optional[float]) -> dict[str, bool]:
    served = summary["365 days"]["served system, as registered"]["vs"]
    out = {f"served_{m}_at_least_{peer.split(' ')[0]}_plus_0.05_with_interval_above_0".replace("@", "_at_"):
           served[peer][m]["value"] >= 0.05 and served[peer][m]["low"] > 0
           for peer in ("REP", "BM25F (tuned on dev)") for m in HEADLINE}
    if job_seconds is not None:
        out["job_at_most_30_minutes"] = job_seconds <= 1800
    return out


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "tracker_online")
    parser.add_argument("--pipeline-run", type=Path, default=None,
                        help="A tracker_system pipeline run folder this bench made earlier: score it, don't run the job.")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--toy", action="store_true", help="Few queries and steps: checks the script, measures nothing.")
    args = parser.parse_args(argv)
    out = args.out.resolve() / ("toy" if args.toy else "")
    out.mkdir(parents=True, exist_ok=True)
    tracking_uri = f"sqlite:///{out / 'mlflow.db'}"
    limit = 20 if args.toy else None

    imported = import_export(args.data, out / "data")
    job: dict[str, Any] = {"import_seconds": imported["seconds"]}
    if args.pipeline_run is None:
        folder = run_job(out / "data", out, tracking_uri, args.toy)
    else:
        folder = args.pipeline_run.resolve()
        job["reused_pipeline_run"] = folder.name
    system = registered_system(folder)
    job["pipeline_seconds"] = system.pop("pipeline_seconds")
    job["seconds"] = job["import_seconds"] + job["pipeline_seconds"]
    print(f"[bench] the job: import {job['import_seconds']:.0f} s, pipeline {job['pipeline_seconds']:.0f} s", flush=True)
    data = Data(out / "data", limit)
    print(f"[bench] {len(data.timeline)} reports; {len(data.test)} test queries (from "
          f"{time.strftime('%Y-%m-%d', time.gmtime(data.test_start))}), {len(data.dev)} dev queries", flush=True)

    rows: dict[str, Any] = {}
    bm25f, bm25f_info = bm25f_rows(data)
    rows.update(bm25f)
    rows["REP"], rep_info = rep_row(data)
    texts = data.texts()
    rows["zero-shot MiniLM"], _ = dense_row(data, "default", texts)
    peer_pairs = out / "peer" / "train.jsonl"
    peer_pairs.parent.mkdir(parents=True, exist_ok=True)
    by_id = dict(zip(data.timeline.ids, texts))
    peer_pairs.write_text("".join(json.dumps({"query": by_id[d], "document": by_id[m]}) + "\n"
                                  for d, m in data.train_pairs), encoding="utf-8")
    peer = train_peer({"train": peer_pairs}, out / "peer", 3 if args.toy else None)
    rows["sentence-transformers trainer"], _ = dense_row(data, peer["model"], texts)
    rows["system bi-encoder, dense (offline)"], _ = dense_row(data, system["model_dir"], texts)

    index, base_documents = base_index(data, system["model_dir"], out / "served-index")
    live = out / "live"
    shutil.rmtree(live, ignore_errors=True)
    with lmp_serve(system["model_uri"], tracking_uri, index, args.port,
                   ["replica_cpus=0.5", f"live.dir={live}", f"limits.max_k={K}"]) as url:
        replayed = replay(url, data)
    served, short = served_rows(data, replayed)
    rows.update(served)

    summary = summarise(rows)
    for label, table in summary.items():
        print(f"[bench] window: {label}", flush=True)
        print_table(table)
    met = targets(summary, job.get("seconds"))
    for name, ok in met.items():
        print(f"{'PASS' if ok else 'MISS'} {name}", flush=True)
    write_result("tracker_online" + ("_toy" if args.toy else ""), {
        "protocol": {"window_days": WINDOW_DAYS, "queries": "test split duplicates (newest period)", "ks": list(KS),
                     "hits_per_served_request": K},
        "job": job, "import": imported["summary"], "system": {"model_uri": system["model_uri"], "search": system["search"]},
        "bm25f": bm25f_info, "rep": rep_info, "peer": peer,
        "served": {"base_index_documents": base_documents, "replayed_reports": replayed["replayed"],
                   "live_seq": replayed["live_seq"], "latency": replayed["latency"], "served_short_lists": short},
        "rows": summary, "targets": met,
    })


if __name__ == "__main__":
    main()
