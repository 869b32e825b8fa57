"""The retrieval task's reader: reports and relations into queries, corpus, relevance and exclusions."""
import json
from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset, RetrievalScenario
from lmplatform.evaluation.tasks.retrieval.data import load_retrieval_data, scenario_inputs, write_split_pairs
from tests.evaluation.tasks.toy_reports import REPORTS, write_jsonl


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


def test_split_pair_files_with_counts_and_limit(dataset: RetrievalDataset, tmp_path: Path) -> None:
    written = write_split_pairs(dataset, tmp_path / "pairs", ["title"], splits=["test", "train"], limit=1)
    assert list(written) == ["test", "train"]
    test = written["test"]
    assert test.path == tmp_path / "pairs" / "test.jsonl" and (test.pairs, test.groups, test.empty) == (1, 1, 0)
    # the limit keeps the first pairs of the split; the group is the smallest id of 1-2-6, over all splits
    assert json.loads(test.path.read_text()) == {"query": "printer paper jam", "document": "printer jams", "group": "1"}
    assert written["train"].path.read_text().count("\n") == 1
