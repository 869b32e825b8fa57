"""The retrieval task through `run_evaluation`: the report, the plot and the MLflow run."""
import json
from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.runner import run_evaluation
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset


def test_bad_config_names_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kind=two_stage needs reranker"):
        load_evaluation_config(None, base={"tasks": [{"task": "retrieval", "datasets": [
            {"name": "d", "corpus": "c", "relations": "r"}], "retrievers": [{"name": "x", "kind": "two_stage", "model": "m"}]}]})
    with pytest.raises(ConfigError, match="does not match any of the expected tags: 'retrieval'"):
        load_evaluation_config(None, base={"tasks": [{"task": "nope"}]})
    dataset = {"name": "d", "corpus": "c", "relations": "r"}
    for spec, message in [({"kind": "dense", "model": "m", "bm25_weights": [0.2]}, "bm25_weights applies to a hybrid"),
                          ({"kind": "hybrid", "model": "m", "bm25_weights": [0.2, 0.2]}, "must be distinct values"),
                          ({"kind": "hybrid", "model": "m", "hybrid": {"fusion": "sum"}}, "retrievers.0.hybrid.fusion"),
                          ({"kind": "hybrid"}, "kind=hybrid needs model")]:
        with pytest.raises(ConfigError, match=message):
            load_evaluation_config(None, base={"tasks": [{"task": "retrieval", "datasets": [dataset],
                                                          "retrievers": [{"name": "x", **spec}]}]})


def test_run_evaluation_writes_report_and_logs_to_mlflow(dataset: RetrievalDataset, tiny_bert: Path, tmp_path: Path,
                                                         mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    cfg = load_evaluation_config(None, base={
        "name": "toy", "output_dir": str(tmp_path / "out"),
        "tracking": {"tracking_uri": mlflow_uri},
        "tasks": [{"task": "retrieval", "datasets": [dataset.model_dump()], "ks": [1, 3], "mrr_ks": [5],
                   "scenarios": [{"name": "obs", "query_fields": ["title", "description"]}],
                   "retrievers": [{"name": "bm25", "kind": "bm25"},
                                  {"name": "tiny", "kind": "dense", "model": str(tiny_bert), "max_seq_length": 32},
                                  {"name": "hybrid", "kind": "hybrid", "model": str(tiny_bert), "max_seq_length": 32,
                                   "bm25_weights": [0.0, 0.5]},
                                  {"name": "reranked", "kind": "two_stage", "first_stage": "hybrid", "model": str(tiny_bert),
                                   "max_seq_length": 32, "reranker": str(tiny_bert), "candidates": 3, "rerank_weight": 0.5}]}],
    })
    result = run_evaluation(cfg)
    report = json.loads(result.report_json.read_text())
    rows = report["tasks"]["retrieval"]["results"]
    assert [r["retriever"] for r in rows] == ["bm25", "tiny", "hybrid-w0", "hybrid-w0.5", "reranked"]
    # weight 0 ranks as the dense retriever; each hybrid row says how it fused
    assert rows[2]["metrics"] == rows[1]["metrics"] and rows[3]["fusion"]["bm25_weight"] == 0.5
    assert rows[4]["fusion"]["bm25_weight"] == 0.2 and rows[4]["queries_evaluated"] == 2
    bm25 = rows[0]
    # query 2 ("printer paper jam ...") -> relevant {1, 6}; query 4 -> {3}; BM25 finds them on shared words
    assert bm25["queries_evaluated"] == 2 and bm25["metrics"]["hit@3"] == 1.0
    assert "| toy | obs | bm25 | 2 | 7 |" in result.report_md.read_text()
    assert (tmp_path / "out" / "recall_at_k_toy_obs.png").stat().st_size > 1000
    run = MlflowClient(mlflow_uri).get_run(result.mlflow_run_id)
    assert run.data.metrics["eval.toy.retrieval.toy.obs.bm25.recall_3"] == pytest.approx(bm25["metrics"]["recall@3"])
    artifacts = [a.path for a in MlflowClient(mlflow_uri).list_artifacts(result.mlflow_run_id, "evaluation/toy")]
    assert "evaluation/toy/report.json" in artifacts and "evaluation/toy/report.md" in artifacts
    # logging into an existing run (the run of the model evaluated)
    again = run_evaluation(cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"run_id": result.mlflow_run_id})}))
    assert again.mlflow_run_id == result.mlflow_run_id
