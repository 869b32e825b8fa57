"""Quality table, retrieval part: packaged MiniLM (zero-shot) and BM25 on OpenOffice duplicate retrieval.

Test split (498 duplicate queries), full corpus (4,548 reports minus the query), a query's
relevant reports = the rest of its duplicate group. Recall@{1,5,10,20}, MRR@{5,15}, MAP.
(STS and classification parts are added by their owners.)

    python bench/quality.py [--limit-queries N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result  # noqa: E402

DATA = Path("/work/shared/data/duplicate_bug_reports/openoffice")
METRICS = ("recall@1", "recall@5", "recall@10", "recall@20", "hit@1", "hit@10", "mrr@5", "mrr@15", "map")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--data", default=str(DATA))
    args = parser.parse_args()

    from lmplatform.evaluation.config import RetrievalTask
    from lmplatform.evaluation.retrieval_eval import run_retrieval_task

    task = RetrievalTask.model_validate({
        "datasets": [{"name": "openoffice", "corpus": f"{args.data}/corpus.jsonl", "relations": f"{args.data}/pairs.jsonl",
                      "split": "test", "relevance": "group", "limit_queries": args.limit_queries}],
        "scenarios": [{"name": "dup_to_all", "query_fields": ["title", "description"], "corpus_fields": ["title", "description"]}],
        "retrievers": [{"name": "minilm_zero_shot", "kind": "dense", "model": "default"}, {"name": "bm25", "kind": "bm25"}],
        "ks": [1, 5, 10, 20], "mrr_ks": [5, 15],
    })
    out = Path(__file__).parent / "results" / "quality_retrieval"
    result = run_retrieval_task(task, out)
    rows = result.details["results"]
    print(f"| retriever | queries | {' | '.join(METRICS)} |")
    print("|---|---|" + "---|" * len(METRICS))
    for r in rows:
        print(f"| {r['retriever']} | {r['queries_evaluated']} | " + " | ".join(f"{r['metrics'][m]:.4f}" for m in METRICS) + " |")
    dense, bm25 = rows[0]["metrics"], rows[1]["metrics"]
    print(f"ratio MiniLM / BM25: recall@10 {dense['recall@10'] / max(bm25['recall@10'], 1e-9):.3f}, "
          f"MAP {dense['map'] / max(bm25['map'], 1e-9):.3f}")
    write_result("quality_retrieval", {
        "dataset": "openoffice test split, full corpus", "toy_run": args.limit_queries is not None,
        "results": [{k: r[k] for k in ("retriever", "queries_evaluated", "corpus_size", "metrics", "index_seconds",
                                         "search_seconds")} for r in rows],
    })


if __name__ == "__main__":
    main()
