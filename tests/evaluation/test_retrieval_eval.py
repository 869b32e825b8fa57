import json
from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.data.readers import DataError
from lmplatform.evaluation.config import RetrievalDataset, RetrievalScenario, load_evaluation_config
from lmplatform.evaluation.retrieval_data import load_retrieval_data, scenario_inputs
from lmplatform.evaluation.runner import run_evaluation

REPORTS = [
    {"id": "1", "title": "printer jams", "description": "the printer on floor two jams every morning"},
    {"id": "2", "title": "printer paper jam", "description": "paper jam in the floor two printer"},
    {"id": "3", "title": "vpn drops", "description": "vpn tunnel drops after the certificate expired"},
    {"id": "4", "title": "vpn disconnects", "description": "certificate expired so the vpn disconnects"},
    {"id": "5", "title": "invoice timeout", "description": "payment gateway times out on invoice"},
    {"id": "6", "title": "printer jam again", "description": "floor two printer jams with paper"},
    {"id": "7", "title": "disk full", "description": "mail server disk is full"},
]
PAIRS = [
    {"duplicate_id": "2", "master_id": "1", "split": "test"},
    {"duplicate_id": "6", "master_id": "2", "split": "train"},
    {"duplicate_id": "4", "master_id": "3", "split": "test"},
    {"duplicate_id": "9", "master_id": "5", "split": "test"},  # unknown query report
]


def write_jsonl(path: Path, rows: list, bad_line: bool = False) -> str:
    lines = [json.dumps(r) for r in rows] + (["{not json"] if bad_line else [])
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def dataset(tmp_path: Path) -> RetrievalDataset:
    return RetrievalDataset(
        name="toy", corpus=write_jsonl(tmp_path / "corpus.jsonl", REPORTS, bad_line=True),
        relations=write_jsonl(tmp_path / "pairs.jsonl", PAIRS),
    )


def test_pairs_reader_groups_splits_and_counts(dataset: RetrievalDataset) -> None:
    data = load_retrieval_data(dataset)
    assert set(data.query_fields) == {"2", "4"}
    assert data.counts["bad_rows"] == 1 and data.counts["relations_unknown_query"] == 1
    inputs = scenario_inputs(data, dataset, RetrievalScenario(name="s", query_fields=["title"]))
    # group relevance spans splits: 6 (a train pair) is a duplicate of 2 as well
    assert inputs.qrels == {"2": {"1", "6"}, "4": {"3"}}
    assert inputs.exclude == [{"2"}, {"4"}]
    assert inputs.query_texts[0] == "printer paper jam"
    targets = scenario_inputs(data, dataset, RetrievalScenario(name="t", corpus_scope="targets"))
    assert set(targets.corpus_ids) == {"1", "2", "3", "5"}
    assert targets.qrels["2"] == {"1"}  # 6 is not a primary
    target_only = dataset.model_copy(update={"relevance": "target"})
    assert scenario_inputs(load_retrieval_data(target_only), target_only, RetrievalScenario(name="s")).qrels["2"] == {"1"}


def test_links_reader_takes_the_duplicate_end_as_query(tmp_path: Path) -> None:
    links = [{"id_a": "1", "id_b": "2", "resolution_a": "Fixed", "resolution_b": "Duplicate", "split": "test"},
             {"id_a": "3", "id_b": "4", "resolution_a": "Fixed", "resolution_b": "Fixed", "split": "test"}]
    ds = RetrievalDataset(name="links", format="links", corpus=write_jsonl(tmp_path / "c.jsonl", REPORTS),
                          relations=write_jsonl(tmp_path / "l.jsonl", links), query_id_field="id_a",
                          target_id_field="id_b", resolution_fields=("resolution_a", "resolution_b"), split=None)
    data = load_retrieval_data(ds)
    assert data.related == {"2": {"1"}, "3": {"4"}, "4": {"3"}}


def test_empty_split_and_missing_file_are_clear(dataset: RetrievalDataset) -> None:
    with pytest.raises(DataError, match="no query left for split='dev'"):
        load_retrieval_data(dataset.model_copy(update={"split": "dev"}))
    with pytest.raises(DataError, match="file not found"):
        load_retrieval_data(dataset.model_copy(update={"corpus": "/nonexistent.jsonl"}))


def test_bad_config_names_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kind=two_stage needs reranker"):
        load_evaluation_config(None, base={"tasks": [{"task": "retrieval", "datasets": [
            {"name": "d", "corpus": "c", "relations": "r"}], "retrievers": [{"name": "x", "kind": "two_stage", "model": "m"}]}]})
    with pytest.raises(ConfigError, match="does not match any of the expected tags: 'retrieval'"):
        load_evaluation_config(None, base={"tasks": [{"task": "nope"}]})


def test_run_evaluation_writes_report_and_logs_to_mlflow(dataset: RetrievalDataset, tiny_bert: Path, tmp_path: Path,
                                                         mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    cfg = load_evaluation_config(None, base={
        "name": "toy", "output_dir": str(tmp_path / "out"),
        "tracking": {"tracking_uri": mlflow_uri},
        "tasks": [{"task": "retrieval", "datasets": [dataset.model_dump()], "ks": [1, 3], "mrr_ks": [5],
                   "scenarios": [{"name": "obs", "query_fields": ["title", "description"]}],
                   "retrievers": [{"name": "bm25", "kind": "bm25"},
                                  {"name": "tiny", "kind": "dense", "model": str(tiny_bert), "max_seq_length": 32}]}],
    })
    result = run_evaluation(cfg)
    report = json.loads(result.report_json.read_text())
    rows = report["tasks"]["retrieval"]["results"]
    assert [r["retriever"] for r in rows] == ["bm25", "tiny"]
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
