"""Quality tables of the packaged MiniLM (zero-shot): retrieval, STS and classification, in one run.

- Retrieval: MiniLM vs BM25 on OpenOffice duplicate retrieval, test split (498 duplicate
  queries), full corpus (4,548 reports minus the query), relevant = the rest of the query's
  duplicate group. Recall@{1,5,10,20}, MRR@{5,15}, MAP.
- STS: Spearman / Pearson of cosine vs gold and EDRM (linear cosine [0,1] -> scale, and an
  isotonic map fitted on the train split where one exists) on STS-B test, SICK test, BIOSSES.
- Classification: frozen MiniLM + MLP head (depth 2, trained on cached embeddings, best dev
  epoch) and KNN (k=5) on medical_abstracts_tc and asrs_nmac_reports (primary_problem, classes
  under 10 reports merged into Other), test split: accuracy, ROC-AUC, weighted/macro F1/P/R,
  confusion PNGs under bench/results/quality/.

Every part is the library's evaluation task (`lmplatform.evaluation.tasks.*`), as run by
`lmp evaluate run`; one model load serves all three.

    python bench/quality.py [--limit N] [--limit-queries N] [--max-seq-length 128]

`--limit` caps every STS file and every classification split, `--limit-queries` the retrieval
queries (toy runs). Writes bench/results/quality.json (quality_toy.json for toy runs).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, SHARED_DATA, write_result

RETRIEVAL_METRICS = ("recall@1", "recall@5", "recall@10", "recall@20", "hit@1", "hit@10", "mrr@5", "mrr@15", "map")


def task_configs(data: Path, limit: Optional[int], limit_queries: Optional[int], max_seq_length: int) -> dict[str, Any]:
    from lmplatform.evaluation import ClassificationTask, RetrievalTask, StsTask

    oo = data / "duplicate_bug_reports" / "openoffice"
    encoder = {"name": "minilm", "model": "default", "max_seq_length": max_seq_length}
    retrieval = RetrievalTask.model_validate({
        "datasets": [{"name": "openoffice", "corpus": f"{oo}/corpus.jsonl", "relations": f"{oo}/pairs.jsonl",
                      "split": "test", "relevance": "group", "limit_queries": limit_queries}],
        "scenarios": [{"name": "dup_to_all", "query_fields": ["title", "description"],
                       "corpus_fields": ["title", "description"]}],
        "retrievers": [{"name": "minilm_zero_shot", "kind": "dense", "model": "default", "max_seq_length": max_seq_length},
                       {"name": "bm25", "kind": "bm25"}],
        "ks": [1, 5, 10, 20], "mrr_ks": [5, 15],
    })
    sick = str(data / "sick" / "sick.jsonl")
    sts = StsTask.model_validate({"task": "sts", "encoders": [encoder], "datasets": [
        {"name": "stsb-test", "path": str(data / "stsbenchmark" / "sts-test.jsonl"), "scale": [0, 5],
         "fit_path": str(data / "stsbenchmark" / "sts-train.jsonl"), "limit": limit},
        {"name": "sick-test", "path": sick, "where": {"split": "test"}, "score_field": "relatedness_score", "scale": [1, 5],
         "fit_path": sick, "fit_where": {"split": "train"}, "limit": limit},
        {"name": "biosses", "path": str(data / "biosses" / "biosses.jsonl"), "scale": [0, 4], "limit": limit},
    ]})
    classification = ClassificationTask.model_validate({"task": "classification", "encoders": [encoder], "knn_k": 5, "datasets": [
        {"name": "medical_abstracts_tc", "path": str(data / "medical_abstracts_tc" / "abstracts.jsonl"),
         "label_field": "label_name", "limit": limit},
        {"name": "asrs_nmac_reports", "path": str(data / "asrs_nmac_reports" / "reports.jsonl"), "text_fields": ["narrative"],
         "label_field": "primary_problem", "min_class_size": 10, "limit": limit},
    ]})
    return {"retrieval": retrieval, "sts": sts, "classification": classification}


def retrieval_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"| retriever | queries | {' | '.join(RETRIEVAL_METRICS)} |", "|---|---|" + "---|" * len(RETRIEVAL_METRICS)]
    for r in rows:
        lines.append(f"| {r['retriever']} | {r['queries_evaluated']} | "
                     + " | ".join(f"{r['metrics'][m]:.4f}" for m in RETRIEVAL_METRICS) + " |")
    dense, bm25 = rows[0]["metrics"], rows[1]["metrics"]
    lines.append(f"\nratio MiniLM / BM25: recall@10 {dense['recall@10'] / max(bm25['recall@10'], 1e-9):.3f}, "
                 f"MAP {dense['map'] / max(bm25['map'], 1e-9):.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="Cap every STS file and classification split (toy runs).")
    parser.add_argument("--limit-queries", type=int, default=None, help="Cap the retrieval queries (toy runs).")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", default=str(SHARED_DATA), help="The shared data folder.")
    args = parser.parse_args()

    import torch

    from lmplatform.evaluation import ModelCache, evaluation_spec

    torch.set_num_threads(args.threads)
    tasks = task_configs(Path(args.data), args.limit, args.limit_queries, args.max_seq_length)
    out = RESULTS / "quality"
    models = ModelCache()  # one MiniLM for all three parts
    seconds: dict[str, float] = {}
    results = {}
    for name in ("retrieval", "sts", "classification"):
        start = time.perf_counter()
        results[name] = evaluation_spec(name).run(tasks[name], out, models)
        seconds[name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {seconds[name]} s", flush=True)

    retrieval_rows = results["retrieval"].details["results"]
    tables = "\n\n".join(["## Retrieval (OpenOffice, test split, full corpus)", retrieval_table(retrieval_rows),
                          results["sts"].markdown.strip(), results["classification"].markdown.strip()])
    print(tables)
    toy = args.limit is not None or args.limit_queries is not None
    write_result("quality_toy" if toy else "quality", {
        "model": "default (packaged MiniLM)", "max_seq_length": args.max_seq_length, "toy_run": toy,
        "limit": args.limit, "limit_queries": args.limit_queries, "seconds": seconds,
        "retrieval": [{k: r[k] for k in ("retriever", "queries_evaluated", "corpus_size", "metrics", "index_seconds",
                                           "search_seconds")} for r in retrieval_rows],
        "sts": results["sts"].details["results"],
        "classification": results["classification"].details["results"],
        "markdown": tables,
    })


if __name__ == "__main__":
    main()
