"""OpenOffice duplicates with the reports' metadata: dense, hybrid and the learned metadata fusion, on test.

Two protocols. "whole corpus" (../shared/notes/openoffice-calibration.md's): the queries are a split's duplicate
reports (title and description), each ranked against the whole corpus (4,548 reports) less itself; its relevant
reports are the rest of its duplicate group. "as filed": what a tracker's duplicate finder sees when the report
arrives: only the reports filed before it are candidates or relevant (a query with no earlier relevant report is
dropped), so no row gains by pushing later reports down. For each encoder (--model NAME=FOLDER, repeatable; default
the packaged MiniLM), in each protocol:
  - dense: every report ranked by cosine;
  - hybrid: BM25 and dense over the pool (each stage's top 100), per-query min-max scores mixed convexly, the BM25
    weight chosen on dev;
  - metadata fusion (retrieval/metadata_fusion.py): a logistic regression over the pool's features (both scores, same
    product, same component, days apart, filed earlier), fitted on the train queries' pools, its regularisation
    chosen on dev; and the same without the time features.
Each row on test: MRR@10 and R@10 with 95% bootstrap intervals, and its paired gain over --peer's dense row (the
sentence-transformers trainer's model) when --peer is given, else over the first model's dense row.

With --serve NAME, that encoder's system is then served as measured (whole corpus): an index of every report
(FAISS over the vectors scored above, BM25, the document store with product, component and created), the version
registered in a sqlite MLflow with its settings (mode 'metadata', the fusion fitted above, the hybrid weight chosen
on dev), `lmp serve run`, and every test query replayed over HTTP one at a time with its own metadata and its own
report left out (exclude_ids), in the modes dense, hybrid and as registered: p50/p99 latency per mode, and each
mode's MRR@10 and R@10 against the offline row's.

    python bench/openoffice_metadata.py [--data ../shared/data] [--model NAME=FOLDER ...] [--peer FOLDER] [--serve NAME]

Writes bench/results/openoffice_metadata.json (--name).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, lmp_serve, write_result
from openoffice_retrieval import interval, paired

HYBRID_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)
REGULARIZATIONS = (0.1, 1.0, 10.0)
PEER = "sentence-transformers trainer"
METADATA_FIELDS = ("product", "component", "created")
# "as registered": no mode in the request, so the version's registered settings (mode 'metadata') answer.
SERVED_MODES = {"dense": {"mode": "dense"}, "hybrid": {"mode": "hybrid"}, "as registered": {}}


class Corpus:
    """The reports, their duplicate groups and each split's queries (positions into the reports)."""

    def __init__(self, folder: Path):
        self.rows = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
        self.texts = [". ".join(p for p in (r.get("title"), r.get("description")) if p) for r in self.rows]
        position = {r["id"]: n for n, r in enumerate(self.rows)}
        parent = list(range(len(self.rows)))

        def root(n: int) -> int:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        self.queries: dict[str, list[int]] = defaultdict(list)
        for line in (folder / "pairs.jsonl").open(encoding="utf-8"):
            pair = json.loads(line)
            a, b = position[pair["duplicate_id"]], position[pair["master_id"]]
            parent[root(a)] = root(b)
            self.queries[pair["split"]].append(a)
        members: dict[int, set[int]] = defaultdict(set)
        for n in range(len(self.rows)):
            members[root(n)].add(n)
        self.relevant = {n: frozenset(members[root(n)] - {n}) for n in range(len(self.rows))}
        self.queries = {split: sorted(set(q)) for split, q in self.queries.items()}
        from lmplatform.data import parse_time

        filed = [parse_time(r.get("created"), "created") for r in self.rows]
        self.filed = np.array([np.nan if t is None else t for t in filed])
        self.later: Optional[dict[int, np.ndarray]] = None  # as filed: per query, the reports filed at its time or later

    def as_filed(self) -> "Corpus":
        """The same queries as each was filed: only earlier reports are candidates or relevant, and a query with
        no earlier relevant report is dropped (what a tracker's duplicate finder sees when the report arrives)."""
        view = copy.copy(self)
        view.later = {q: np.flatnonzero(~(self.filed < self.filed[q])) for queries in self.queries.values() for q in queries}
        view.relevant = {q: frozenset(r for r in self.relevant[q] if self.filed[r] < self.filed[q]) for q in view.later}
        view.queries = {split: [q for q in queries if view.relevant[q]] for split, queries in self.queries.items()}
        return view

    def excluded(self, q: int) -> np.ndarray:
        """What a query is never ranked against: itself, and (as filed) every report filed at its time or later."""
        return self.later[q] if self.later is not None else np.array([q])


def first_relevant_metrics(ranking: np.ndarray, relevant: frozenset[int]) -> tuple[float, float]:
    """(MRR@10, R@10: the share of the relevant reports in the top 10) of one ranking."""
    top = ranking[:10].tolist()
    hits = [k for k, doc in enumerate(top) if doc in relevant]
    return (1.0 / (hits[0] + 1) if hits else 0.0), len(hits) / len(relevant)


class Scored:
    """One encoder's scores over one protocol's queries: every query's dense scores, pool and pool features."""

    def __init__(self, corpus: Corpus, vectors: np.ndarray, bm25_scores: dict[int, np.ndarray], cfg: Any):
        from lmplatform.retrieval import candidate_pool, fusion_features

        self.corpus, self.cfg = corpus, cfg
        self.dense, self.pools, self.features = {}, {}, {}
        for queries in corpus.queries.values():
            for q in queries:
                dense = vectors @ vectors[q]
                dense[corpus.excluded(q)] = -np.inf
                pool = candidate_pool(dense, bm25_scores[q], cfg.pool, excluded=corpus.excluded(q))
                self.dense[q], self.pools[q] = dense, pool
                self.features[q] = fusion_features(dense[pool], bm25_scores[q][pool], corpus.rows[q],
                                                   [corpus.rows[c] for c in pool], cfg)

    def metrics(self, split: str, score: Any) -> dict[str, np.ndarray]:
        """Per-query MRR@10 and R@10 of a split, `score(q)` ranking each pool (None: dense over every candidate)."""
        out = defaultdict(list)
        for q in self.corpus.queries[split]:
            order = (np.argsort(-self.dense[q], kind="stable") if score is None
                     else self.pools[q][np.argsort(-score(q), kind="stable")])
            mrr, recall = first_relevant_metrics(order, self.corpus.relevant[q])
            out["mrr@10"].append(mrr)
            out["recall@10"].append(recall)
        return {k: np.asarray(v) for k, v in out.items()}

    def dev_mrr(self, score: Any) -> float:
        return float(self.metrics("dev", score)["mrr@10"].mean())

    def hybrid(self, weight: float) -> Any:
        return lambda q: (1 - weight) * self.features[q][:, 0] + weight * self.features[q][:, 1]

    def fitted(self, cfg: Any) -> tuple[Any, Any]:
        """(the fusion fitted on the train queries' pools with `cfg`'s features, its scoring of a query's pool)."""
        from lmplatform import MetadataFusion
        from lmplatform.retrieval import feature_names

        columns = [feature_names(self.cfg).index(f) for f in feature_names(cfg)]
        train = self.corpus.queries["train"]
        fusion = MetadataFusion.fit([self.features[q][:, columns] for q in train],
                                    [np.isin(self.pools[q], list(self.corpus.relevant[q])) for q in train], cfg)
        return fusion, (lambda q: fusion.score(self.features[q][:, columns]))


# -- the served replay --------------------------------------------------------------------------------------
def served_index(corpus: Corpus, corpus_file: Path, vectors: np.ndarray, folder: Path) -> Path:
    """An index folder of every report, as build_index makes one (FAISS, BM25 of the texts, the document store with
    METADATA_FIELDS), over the vectors the offline rows were scored with; ids are the reports' own."""
    from lmplatform.retrieval import BM25_DIR, DOCUMENTS_FILE, BM25Retriever, VectorIndex, write_document_store

    ids = [str(r["id"]) for r in corpus.rows]
    VectorIndex.build(ids, vectors, kind="flat").save(folder)
    bm25 = BM25Retriever()
    bm25.index(ids, corpus.texts)
    bm25.save(folder / BM25_DIR)
    write_document_store(corpus_file, folder / DOCUMENTS_FILE, text_fields=["description"], metadata_fields=METADATA_FIELDS)
    return folder


def replay(url: str, corpus: Corpus) -> dict[str, Any]:
    """Every test query in every mode, one request at a time: per-query metrics and latencies per mode."""
    import httpx

    position = {str(r["id"]): n for n, r in enumerate(corpus.rows)}
    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for label, mode in SERVED_MODES.items():
            metrics, latencies = defaultdict(list), []
            for q in corpus.queries["test"]:
                row = corpus.rows[q]
                body = {"query": corpus.texts[q], "k": 10, "exclude_ids": [str(row["id"])], **mode,
                        "metadata": {f: row[f] for f in METADATA_FIELDS if row.get(f) is not None}}
                start = time.perf_counter()
                response = client.post("/v1/search", json=body)
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()
                ranking = np.array([position[hit["id"]] for hit in response.json()["hits"]])
                mrr, recall = first_relevant_metrics(ranking, corpus.relevant[q])
                metrics["mrr@10"].append(mrr)
                metrics["recall@10"].append(recall)
            out[label] = {"per_query": {m: np.asarray(v) for m, v in metrics.items()},
                          "p50_ms": float(np.percentile(latencies, 50) * 1000),
                          "p99_ms": float(np.percentile(latencies, 99) * 1000)}
            print(f"[bench] served {label}: p50 {out[label]['p50_ms']:.1f} ms, p99 {out[label]['p99_ms']:.1f} ms, "
                  f"MRR@10 {out[label]['per_query']['mrr@10'].mean():.4f}", flush=True)
    return out


def serve_and_replay(corpus: Corpus, corpus_file: Path, vectors: np.ndarray, model: str, settings: Any,
                     port: int) -> dict[str, Any]:
    """Index, register (sqlite MLflow in a temporary folder) and serve the system, replay the test queries, stop."""
    from lmplatform import register_search_settings
    from lmplatform.testing import register_with_index

    with tempfile.TemporaryDirectory(prefix="lmp-metadata-serve-") as tmp:
        work = Path(tmp)
        tracking_uri = f"sqlite:///{work / 'mlflow.db'}"
        index = served_index(corpus, corpus_file, vectors, work / "index")
        version = register_with_index(tracking_uri, "openoffice-metadata", Path(model), index,
                                      experiment="openoffice-metadata-bench").version
        register_search_settings(tracking_uri, "openoffice-metadata", version, settings)
        with lmp_serve(f"models:/openoffice-metadata/{version}", tracking_uri, index, port,
                       ["limits.max_query_chars=100000"]) as url:
            return replay(url, corpus)


def served_rows(served: dict[str, Any], name: str, whole: dict[str, Any], per_query: dict[str, Any]) -> dict[str, Any]:
    """The served modes as rows (whole corpus), each against its offline row, with latencies and the targets."""
    offline = {"dense": f"{name}, dense", "hybrid": f"{name}, hybrid", "as registered": f"{name}, metadata fusion"}
    reference = per_query[whole["reference"]]
    rows = {}
    for mode, replayed in served.items():
        scores = replayed["per_query"]
        rows[mode] = {"metrics": {m: interval(v) for m, v in scores.items()},
                      "gain_over_reference": {m: paired(v, reference[m]) for m, v in scores.items()},
                      "minus_offline": {m: round(float(v.mean() - per_query[offline[mode]][m].mean()), 6)
                                        for m, v in scores.items()},
                      "offline_row": offline[mode], "p50_ms": round(replayed["p50_ms"], 2),
                      "p99_ms": round(replayed["p99_ms"], 2)}
    system, peer_mrr = rows["as registered"], whole["rows"][whole["reference"]]["metrics"]["mrr@10"][0]
    targets = {
        "served_mrr_at_10_at_least_reference_plus_0.05": system["metrics"]["mrr@10"][0] >= peer_mrr + 0.05,
        "mrr_at_10_gain_interval_above_0": system["gain_over_reference"]["mrr@10"][1] > 0,
        "recall_at_10_gain_interval_above_0": system["gain_over_reference"]["recall@10"][1] > 0,
        "served_equals_offline_to_3_decimals": all(abs(d) < 5e-4 for row in rows.values() for d in row["minus_offline"].values()),
        "hybrid_p50_at_most_1.3x_dense": rows["hybrid"]["p50_ms"] <= 1.3 * rows["dense"]["p50_ms"],
    }
    return {"system": name, "protocol": "whole corpus", "rows": rows, "targets": targets,
            "metadata_p50_over_dense": round(system["p50_ms"] / rows["dense"]["p50_ms"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--model", action="append", default=[], help="NAME=FOLDER of an encoder (repeatable).")
    parser.add_argument("--peer", help="The sentence-transformers trainer's model folder: the gains' reference.")
    parser.add_argument("--name", default="openoffice_metadata", help="Result file bench/results/<name>.json.")
    parser.add_argument("--serve", metavar="NAME", help="Serve this encoder's system and replay the test queries over HTTP.")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args()

    from lmplatform import Encoder, SearchSettings
    from lmplatform.models import resolve_model_path
    from lmplatform.retrieval import BM25Retriever, MetadataFusionConfig

    whole = Corpus(args.data / "duplicate_bug_reports" / "openoffice")
    protocols = {"whole corpus": whole, "as filed": whole.as_filed()}
    models = dict(m.split("=", 1) for m in args.model) or {"MiniLM zero-shot": str(resolve_model_path("default"))}
    if args.peer:
        models = {PEER: args.peer, **models}
    if args.serve is not None and args.serve not in models:
        parser.error(f"--serve {args.serve!r} is none of the encoders: {list(models)}")
    served_system: dict[str, Any] = {}
    bm25 = BM25Retriever()
    bm25.index([str(n) for n in range(len(whole.texts))], whole.texts)
    splits = ("train", "dev", "test")
    bm25_scores = {q: s.astype(np.float64) for split in splits for q, s in
                   zip(whole.queries[split], bm25.query_scores([whole.texts[q] for q in whole.queries[split]]))}
    with_time, without_time = MetadataFusionConfig(), MetadataFusionConfig(time_field=None)
    results: dict[str, Any] = {protocol: {"rows": {}} for protocol in protocols}
    per_query: dict[str, dict[str, dict[str, np.ndarray]]] = {protocol: {} for protocol in protocols}
    for name, folder in models.items():
        start = time.perf_counter()
        vectors = Encoder.from_pretrained(folder).encode(whole.texts, batch_size=32, num_threads=2)
        encode_s = time.perf_counter() - start
        for protocol, corpus in protocols.items():
            rows = results[protocol]["rows"]
            scored = Scored(corpus, vectors, bm25_scores, with_time)
            weight = max(HYBRID_WEIGHTS, key=lambda w: scored.dev_mrr(scored.hybrid(w)))
            chosen: dict[str, Any] = {"hybrid_bm25_weight": weight}
            systems: dict[str, Any] = {"dense": None, "hybrid": scored.hybrid(weight)}
            fitted = {}
            for label, base in (("metadata fusion", with_time), ("metadata fusion, no time", without_time)):
                fits = {c: scored.fitted(base.model_copy(update={"regularization": c})) for c in REGULARIZATIONS}
                best = max(REGULARIZATIONS, key=lambda c: scored.dev_mrr(fits[c][1]))
                fitted[label], systems[label] = fits[best]
                chosen[label] = {"regularization": best, **fitted[label].to_dict()}
            for label, score in systems.items():
                key = f"{name}, {label}"
                per_query[protocol][key] = scored.metrics("test", score)
                rows[key] = {"dev_mrr@10": round(scored.dev_mrr(score), 4),
                             "metrics": {m: interval(v) for m, v in per_query[protocol][key].items()}}
            rows[f"{name}, dense"]["encode_seconds"] = round(encode_s, 1)
            rows[f"{name}, dense"]["chosen_on_dev"] = chosen
            if name == args.serve and protocol == "whole corpus":
                served_system = {"vectors": vectors, "settings": SearchSettings(
                    mode="metadata", bm25_weight=weight, metadata_fusion=fitted["metadata fusion"].to_dict())}
            print(f"{protocol}, {name}: " + ", ".join(f"{label} {rows[f'{name}, {label}']['metrics']['mrr@10'][0]:.3f}"
                                                      for label in systems) + " (test MRR@10)", flush=True)
    for protocol, corpus in protocols.items():
        rows = results[protocol]["rows"]
        reference = f"{PEER}, dense" if args.peer else next(iter(rows))
        scored = per_query[protocol]
        for key, row in rows.items():
            row["gain_over_reference"] = {m: paired(scored[key][m], scored[reference][m]) for m in scored[key]}
        results[protocol].update(reference=reference, queries={split: len(corpus.queries[split]) for split in splits})
    if served_system:
        results["served"] = served_rows(serve_and_replay(whole, args.data / "duplicate_bug_reports" / "openoffice" /
                                                         "corpus.jsonl", served_system["vectors"], models[args.serve],
                                                         served_system["settings"], args.port),
                                        args.serve, results["whole corpus"], per_query["whole corpus"])
        print(f"[bench] served: {results['served']['targets']}", flush=True)
    write_result(args.name, {
        # the encoders by name: their folders are this machine's paths
        "config": {"models": list(models), "peer": PEER if args.peer else None, "hybrid_weights": HYBRID_WEIGHTS,
                   "regularizations": REGULARIZATIONS, "pool": with_time.pool},
        "reports": len(whole.texts), **results,
    })


if __name__ == "__main__":
    main()
