"""Quality of hybrid retrieval on the OpenOffice duplicates: the BM25 weight chosen on dev, reported on test.

The protocol of configs/eval/openoffice_hybrid.yaml (`lmp evaluate`'s retrieval task): each duplicate
report (title and description) is ranked against all 4,548 reports but itself, and the other reports of its
duplicate group are relevant. The corpus is encoded once by MiniLM ('default'; the index of
bench/hybrid_serve.py, built if missing); `HybridRetriever` then scores every convex weight 0, 0.1, ..., 1
(0 is MiniLM alone) and reciprocal rank fusion on dev and on test. The weight with the best dev MRR@10
(ties: the smaller) is the one reported on test, against MiniLM alone and BM25 alone, with a 95% paired
bootstrap interval over the test queries.

    python bench/hybrid_quality.py [--data ../shared/data]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result
from hybrid_serve import ROOT, build, corpus_and_queries

WEIGHTS = [round(0.1 * i, 1) for i in range(11)]
METRICS = ("mrr@10", "recall@1", "recall@10", "recall@20")


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int = 2000, seed: int = 13) -> dict[str, float]:
    """Mean of b - a over queries and its 95% interval, resampling queries with replacement."""
    rng = np.random.default_rng(seed)
    diff = b - a
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    return {"mean": round(float(diff.mean()), 4), "low": round(float(np.percentile(means, 2.5)), 4),
            "high": round(float(np.percentile(means, 97.5)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder (OpenOffice duplicates).")
    parser.add_argument("--model", default="default")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "bench" / "hybrid_serve"))
    parser.add_argument("--name", default="hybrid_quality")
    args = parser.parse_args()

    from lmplatform import Encoder
    from lmplatform.evaluation import RetrievalDataset, RetrievalScenario, load_retrieval_data, scenario_inputs
    from lmplatform.metrics import retrieval_report
    from lmplatform.models import resolve_model_path
    from lmplatform.retrieval import (
        BM25_DIR,
        BM25Retriever,
        DenseRetriever,
        FusionSettings,
        HybridRetriever,
        VectorIndex,
    )

    model = str(resolve_model_path(args.model))
    index_dir = Path(args.work_dir) / "index"
    build(model, corpus_and_queries(Path(args.data))[0], index_dir)
    dense = DenseRetriever(Encoder.from_pretrained(model), vector_index=VectorIndex.load(index_dir))
    hybrid = HybridRetriever(dense, BM25Retriever.load(index_dir / BM25_DIR))
    folder = Path(args.data) / "duplicate_bug_reports" / "openoffice"
    scenario = RetrievalScenario(name="report_to_corpus", query_fields=["title", "description"],
                                 corpus_fields=["title", "description"], corpus_scope="all")
    variants = [(f"convex-w{w:g}", FusionSettings(bm25_weight=w)) for w in WEIGHTS] + [("rrf", FusionSettings(fusion="rrf"))]
    results: dict[str, Any] = {}
    per_query: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for split in ("dev", "test"):
        dataset = RetrievalDataset(name=split, corpus=str(folder / "corpus.jsonl"), relations=str(folder / "pairs.jsonl"),
                                   split=split, relevance="group")
        inputs = scenario_inputs(load_retrieval_data(dataset), dataset, scenario)
        assert set(inputs.corpus_ids) == set(dense.vector_index.ids), "the index is not of this corpus"
        results[split], per_query[split] = {"queries": len(inputs.query_ids)}, {}
        for name, settings in variants:
            hybrid.settings = settings
            hits = hybrid.search(inputs.query_texts, 20, exclude=inputs.exclude)
            report = retrieval_report({q: [d for d, _ in row] for q, row in zip(inputs.query_ids, hits)}, inputs.qrels,
                                      ks=(1, 10, 20), mrr_ks=(10,))
            results[split][name] = {m: round(report.metrics[m], 4) for m in METRICS}
            per_query[split][name] = report.per_query
            print(f"{split} {name}: {results[split][name]}", flush=True)
    chosen = max(WEIGHTS, key=lambda w: (results["dev"][f"convex-w{w:g}"]["mrr@10"], -w))
    test = per_query["test"]
    queries = sorted(test["convex-w0"])

    def column(name: str) -> np.ndarray:
        return np.array([test[name][q]["mrr@10"] for q in queries])

    summary = {"bm25_weight_chosen_on_dev": chosen,
               "test_mrr@10": {"minilm": results["test"]["convex-w0"]["mrr@10"],
                               "bm25": results["test"]["convex-w1"]["mrr@10"],
                               "hybrid": results["test"][f"convex-w{chosen:g}"]["mrr@10"],
                               "rrf": results["test"]["rrf"]["mrr@10"]},
               "test_mrr@10_gain_over_minilm": paired_bootstrap(column("convex-w0"), column(f"convex-w{chosen:g}")),
               "test_mrr@10_ratio_over_minilm": round(results["test"][f"convex-w{chosen:g}"]["mrr@10"]
                                                      / results["test"]["convex-w0"]["mrr@10"], 4)}
    print(summary, flush=True)
    write_result(args.name, {"config": vars(args), "protocol": "each query against the whole corpus but itself; group "
                             "relevance; weight chosen on dev MRR@10", "summary": summary, "results": results})


if __name__ == "__main__":
    main()
