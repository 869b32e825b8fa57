"""The retrieval task under `protocol: online`: BM25 ranking buckets of earlier reports, checked by hand."""
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset, RetrievalTask
from lmplatform.evaluation.tasks.retrieval.data import load_retrieval_data
from lmplatform.evaluation.tasks.retrieval.online_data import online_inputs
from lmplatform.evaluation.tasks.retrieval.task import retrieval_section, run
from tests.evaluation.tasks.toy_reports import write_jsonl

START = datetime(2020, 1, 1, tzinfo=timezone.utc)


def filed(day: int) -> str:
    return (START + timedelta(days=day)).isoformat()


# 4 duplicates 1 (day 3): only 1 shares its words -> its bucket 1st.
# 5 duplicates 2 (day 4), "disk vpn": 3 ("disk disk full", a report of its own) outscores 2 ("vpn drops") on BM25
#   (same idf, tf 2 against 1) -> its bucket 2nd.
# 6 duplicates 1 on day 400: 1 and 4 lie outside the 365-day window -> a miss, counted.
# 7 has no time: never a candidate although it matches 4 and 6 word for word.
REPORTS = [
    {"id": "1", "title": "printer jams", "created": filed(0)},
    {"id": "2", "title": "vpn drops", "created": filed(1)},
    {"id": "3", "title": "disk disk full", "created": filed(2)},
    {"id": "4", "title": "printer jams today", "created": filed(3)},
    {"id": "5", "title": "disk vpn", "created": filed(4)},
    {"id": "6", "title": "printer jams", "created": filed(400)},
    {"id": "7", "title": "printer jams"},
]
PAIRS = [{"duplicate_id": "4", "master_id": "1", "split": "test"}, {"duplicate_id": "5", "master_id": "2", "split": "test"},
         {"duplicate_id": "6", "master_id": "1", "split": "test"}]


@pytest.fixture
def online(tmp_path: Path) -> RetrievalDataset:
    return RetrievalDataset(name="online", corpus=write_jsonl(tmp_path / "reports.jsonl", REPORTS),
                            relations=write_jsonl(tmp_path / "pairs.jsonl", PAIRS), protocol="online")


def test_bm25_online_by_hand(online: RetrievalDataset, tmp_path: Path) -> None:
    corpus = online.model_copy(update={"name": "corpus", "protocol": "corpus"})
    task = RetrievalTask(datasets=[online, corpus], scenarios=[{"name": "titles", "query_fields": ["title"],
                                                                "corpus_fields": ["title"]}],
                         retrievers=[{"name": "bm25", "kind": "bm25"}], ks=[1, 5], mrr_ks=[5])
    result = run(task, tmp_path / "out")
    row, corpus_row = result.details["results"]
    assert row["protocol"] == "online" and row["queries_evaluated"] == 3
    assert row["ranks"] == {"4": 1, "5": 2, "6": None}
    assert row["metrics"] == pytest.approx({"rr@1": 1 / 3, "rr@5": 2 / 3, "mrr@5": 0.5, "mrr@10": 0.5, "map": 0.5})
    assert row["counts"] == {"queries": 3, "misses_outside_window": 1, "unknown_time": 1, "reports": 7}
    assert result.metrics["online.titles.bm25.rr@1"] == pytest.approx(1 / 3)
    assert "recall@1" in corpus_row["metrics"]  # the other dataset keeps the whole-corpus protocol
    section = retrieval_section(result.details["results"])
    assert "| online | titles | bm25 | 3 | 7 | 0.3333 | 0.6667 |" in section and "misses: 1" in section
    assert (tmp_path / "out" / "recall_at_k_online_titles.png").is_file()
    # without a window 6 finds 1 and 4 (one bucket) first
    unbounded = online.model_copy(update={"window_days": None})
    row = run(task.model_copy(update={"datasets": [unbounded]}), tmp_path / "out2").details["results"][0]
    assert row["ranks"] == {"4": 1, "5": 2, "6": 1}


def test_online_queries_follow_split_and_period(online: RetrievalDataset) -> None:
    data = load_retrieval_data(online)
    scenario = RetrievalTask(datasets=[online], retrievers=[{"name": "b", "kind": "bm25"}]).scenarios[0]
    inputs = online_inputs(data, online, scenario)
    assert [inputs.timeline.ids[q] for q in inputs.queries] == ["4", "5", "6"]
    period = online.model_copy(update={"period_start": filed(4), "period_end": filed(100)})
    assert [inputs.timeline.ids[q] for q in online_inputs(data, period, scenario).queries] == ["5"]
    everything = online.model_copy(update={"split": None})
    assert len(online_inputs(load_retrieval_data(everything), everything, scenario).queries) == 3


def test_online_config_is_checked() -> None:
    base = {"name": "d", "corpus": "c", "relations": "r", "protocol": "online"}
    for extra, message in [({"query_text_source": "relations"}, "needs query_text_source=corpus"),
                           ({"period_start": "soon"}, "period_start: 'soon' is not a time"),
                           ({"online_depth": 5}, "online_depth 5 is below the largest k")]:
        with pytest.raises(ConfigError, match=message):
            load_evaluation_config(None, base={"tasks": [{"task": "retrieval", "datasets": [{**base, **extra}],
                                                          "retrievers": [{"name": "x", "kind": "bm25"}]}]})


def test_dense_scores_every_report_and_hybrid_its_top_k(online: RetrievalDataset, tiny_bert: Path, tmp_path: Path) -> None:
    # dense: exact inner products with every stored vector; hybrid at bm25 weight 0 (its top `online_depth`, min-max
    # scaled dense scores): the same order, so the same bucket ranks
    task = RetrievalTask(datasets=[online.model_copy(update={"window_days": None})],
                         retrievers=[{"name": "dense", "kind": "dense", "model": str(tiny_bert), "max_seq_length": 32},
                                     {"name": "hybrid", "kind": "hybrid", "model": str(tiny_bert), "max_seq_length": 32,
                                      "bm25_weights": [0.0]}], ks=[1, 5], mrr_ks=[5])
    dense, hybrid = run(task, tmp_path / "out").details["results"]
    assert dense["counts"]["queries"] == 3 and all(rank is not None for rank in dense["ranks"].values())
    assert hybrid["ranks"] == dense["ranks"] and hybrid["metrics"] == dense["metrics"]
