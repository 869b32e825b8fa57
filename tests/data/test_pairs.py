"""Reading (query, document) pairs: fields, hard negatives, bad rows with file and line, split."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.config.schema import DataConfig
from lmplatform.data.pairs import read_pairs
from lmplatform.data.readers import DataError


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_pairs_with_hard_negatives_and_bad_rows(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", [
        {"q": "printer jams", "d": "paper jam in tray 2", "neg": ["vpn drops", "disk full"]},
        {"q": "login fails", "d": "sso timeout"},
        {"q": "no document"},
        "{broken json",
        {"q": "x", "d": None},
        {"q": "bad negatives", "d": "doc", "neg": 3},
    ])
    cfg = DataConfig(train_paths=[str(path)], query_field="q", document_field="d", hard_negative_field="neg",
                     validation_fraction=0.0)
    pairs = read_pairs(cfg)
    assert [(p.query, p.document) for p in pairs.train] == [("printer jams", "paper jam in tray 2"),
                                                            ("login fails", "sso timeout")]
    assert pairs.train[0].hard_negatives == ("vpn drops", "disk full") and pairs.train[1].hard_negatives == ()
    assert pairs.train[0].source.endswith("p.jsonl:1")
    report = pairs.report
    assert report.rows_read == 6 and report.bad_total == 4
    assert report.bad_rows == {"missing_text_field": 1, "not_valid_json": 1, "is_null": 1, "bad_hard_negatives": 1}
    assert any(e.endswith("p.jsonl:3: missing text field 'd' (fields: q)") for e in report.bad_examples)
    assert pairs.rows("train")[0]["hard_negatives"] == ["vpn drops", "disk full"]
    with pytest.raises(DataError, match=r"p.jsonl:3"):
        read_pairs(cfg.model_copy(update={"on_bad_row": "fail"}))


def test_csv_pairs_and_json_list_cells(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text('question,answer,negs\nwhy slow,"index missing","[""a"", ""b""]"\nwhy down,dns,c\n')
    cfg = DataConfig(train_paths=[str(path)], query_field="question", document_field="answer",
                     hard_negative_field="negs", validation_fraction=0.0)
    pairs = read_pairs(cfg)
    assert [p.hard_negatives for p in pairs.train] == [("a", "b"), ("c",)]


def test_split_is_by_query_and_stable(tmp_path: Path) -> None:
    rows = [{"query": f"query {i % 40}", "document": f"doc {i}"} for i in range(200)]
    path = _write(tmp_path / "p.jsonl", rows)
    cfg = DataConfig(train_paths=[str(path)], validation_fraction=0.25)
    first, second = read_pairs(cfg), read_pairs(cfg)
    assert first.train == second.train and 0 < len(first.validation) < 130
    train_queries = {p.query for p in first.train}
    assert not train_queries & {p.query for p in first.validation}  # one query never straddles the split


def test_no_usable_pairs_names_the_fields(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", [{"text": "a"}])
    with pytest.raises(DataError, match="query_field='query'.*first problem: .*p.jsonl:1"):
        read_pairs(DataConfig(train_paths=[str(path)]))
    with pytest.raises(DataError, match="not plain text"):
        read_pairs(DataConfig(train_paths=[str(_write(tmp_path / "p.txt", ["a"]))]))


def test_a_group_field_names_each_pair_s_duplicate_group(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", [
        {"q": "printer jams", "d": "paper jam", "g": "G1"},
        {"q": "printer stuck", "d": "paper jam again", "g": 7},
        {"q": "no group", "d": "doc"},
        {"q": "list group", "d": "doc", "g": ["G1"]},
    ])
    cfg = DataConfig(train_paths=[str(path)], query_field="q", document_field="d", group_field="g", validation_fraction=0.0)
    pairs = read_pairs(cfg)
    assert [p.group for p in pairs.train] == ["G1", "7"]
    assert pairs.report.bad_rows == {"missing_group_id": 1, "bad_group_id": 1}
    assert read_pairs(cfg.model_copy(update={"group_field": None})).train[2].group is None
