"""`lmp demo --results-file`: the demo's summary as a result file docs/benchmarks.md can cite."""
from __future__ import annotations

import json
import time
from pathlib import Path

from lmplatform.demo import DemoSummary
from lmplatform.result_files import write_result_file


def test_demo_result_file_holds_seconds_per_step_the_figures_and_the_machine(tmp_path: Path) -> None:
    summary = DemoSummary()
    summary.add("train", "train: MLM, DeCLUTR, pairs, pairs + EWC", "pipeline run demo-1", time.perf_counter() - 2.0)
    summary.metrics["retrieval_test"] = {"bm25": {"mrr@5": 0.5}, "pairs_ewc": {"mrr@5": 0.75}}
    summary.add("evaluate", "evaluate: retrieval MRR@5 (held-out test)", "pairs+EWC 0.750 · BM25 0.500",
                time.perf_counter() - 1.0)

    summary.metrics["champion_gate"] = {"reason": f"compared on {tmp_path}/runs/demo/test.jsonl and "
                                                  f"{tmp_path.parent}/shared/data/sts.jsonl"}

    path = write_result_file(tmp_path / "results" / "demo.json", summary.result(total_seconds=3.0), root=tmp_path)

    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["total_seconds"] == 3.0
    assert set(result["seconds"]) == {"train", "evaluate"} and 2.0 <= result["seconds"]["train"] < 3.0
    assert result["retrieval_test"]["pairs_ewc"]["mrr@5"] == 0.75
    assert [row["step"] for row in result["summary"]] == [row[0] for row in summary.rows]
    assert {"cpus", "date", "load_average", "python"} <= set(result["machine"])
    # no folder of the machine it ran on: paths relative to the repository, the data as ../shared
    assert result["champion_gate"]["reason"] == "compared on runs/demo/test.jsonl and ../shared/data/sts.jsonl"
