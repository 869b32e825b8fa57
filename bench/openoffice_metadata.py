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

    python bench/openoffice_metadata.py [--data ../shared/data] [--model NAME=FOLDER ...] [--peer FOLDER]

Writes bench/results/openoffice_metadata.json (--name).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result
from openoffice_retrieval import interval, paired

HYBRID_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5)
REGULARIZATIONS = (0.1, 1.0, 10.0)
PEER = "sentence-transformers trainer"


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
        from lmplatform.retrieval.metadata_fusion import parse_time

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
        from lmplatform.retrieval.metadata_fusion import candidate_pool, fusion_features

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
        from lmplatform.retrieval.metadata_fusion import MetadataFusion, feature_names

        columns = [feature_names(self.cfg).index(f) for f in feature_names(cfg)]
        train = self.corpus.queries["train"]
        fusion = MetadataFusion.fit([self.features[q][:, columns] for q in train],
                                    [np.isin(self.pools[q], list(self.corpus.relevant[q])) for q in train], cfg)
        return fusion, (lambda q: fusion.score(self.features[q][:, columns]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--model", action="append", default=[], help="NAME=FOLDER of an encoder (repeatable).")
    parser.add_argument("--peer", help="The sentence-transformers trainer's model folder: the gains' reference.")
    parser.add_argument("--name", default="openoffice_metadata", help="Result file bench/results/<name>.json.")
    args = parser.parse_args()

    from lmplatform.models.encoder import Encoder
    from lmplatform.models.resolve import resolve_model_path
    from lmplatform.retrieval.metadata_fusion import MetadataFusionConfig
    from lmplatform.retrieval.retrievers import BM25Retriever

    whole = Corpus(args.data / "duplicate_bug_reports" / "openoffice")
    protocols = {"whole corpus": whole, "as filed": whole.as_filed()}
    models = dict(m.split("=", 1) for m in args.model) or {"MiniLM zero-shot": str(resolve_model_path("default"))}
    if args.peer:
        models = {PEER: args.peer, **models}
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
            for label, base in (("metadata fusion", with_time), ("metadata fusion, no time", without_time)):
                fits = {c: scored.fitted(base.model_copy(update={"regularization": c})) for c in REGULARIZATIONS}
                best = max(REGULARIZATIONS, key=lambda c: scored.dev_mrr(fits[c][1]))
                chosen[label] = {"regularization": best, **fits[best][0].to_dict()}
                systems[label] = fits[best][1]
            for label, score in systems.items():
                key = f"{name}, {label}"
                per_query[protocol][key] = scored.metrics("test", score)
                rows[key] = {"dev_mrr@10": round(scored.dev_mrr(score), 4),
                             "metrics": {m: interval(v) for m, v in per_query[protocol][key].items()}}
            rows[f"{name}, dense"]["encode_seconds"] = round(encode_s, 1)
            rows[f"{name}, dense"]["chosen_on_dev"] = chosen
            print(f"{protocol}, {name}: " + ", ".join(f"{label} {rows[f'{name}, {label}']['metrics']['mrr@10'][0]:.3f}"
                                                      for label in systems) + " (test MRR@10)", flush=True)
    for protocol, corpus in protocols.items():
        rows = results[protocol]["rows"]
        reference = f"{PEER}, dense" if args.peer else next(iter(rows))
        scored = per_query[protocol]
        for key, row in rows.items():
            row["gain_over_reference"] = {m: paired(scored[key][m], scored[reference][m]) for m in scored[key]}
        results[protocol].update(reference=reference, queries={split: len(corpus.queries[split]) for split in splits})
    write_result(args.name, {
        # the encoders by name: their folders are this machine's paths
        "config": {"models": list(models), "peer": PEER if args.peer else None, "hybrid_weights": HYBRID_WEIGHTS,
                   "regularizations": REGULARIZATIONS, "pool": with_time.pool},
        "reports": len(whole.texts), **results,
    })


if __name__ == "__main__":
    main()
