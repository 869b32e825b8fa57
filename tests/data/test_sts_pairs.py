"""The scored-pair reader: bad rows by file and line, a row filter, and the shared benchmarks' scales."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.data.sts_pairs import read_biosses, read_pairs_jsonl, read_sick, read_stsb
from tests.conftest import SHARED_DATA


def test_reader_counts_bad_rows_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    rows = [
        {"sentence1": "a cat", "sentence2": "a dog", "score": 2.0, "split": "test"},
        "not json",
        {"sentence1": "a cat", "sentence2": "", "score": 2.0, "split": "test"},
        {"sentence1": "x", "sentence2": "y", "score": 9.0, "split": "test"},
        {"sentence1": "x", "sentence2": "y", "score": 1.0, "split": "train"},
        {"sentence1": "x", "sentence2": "y", "score": "high", "split": "test"},
    ]
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    pairs = read_pairs_jsonl(path, "toy", (0.0, 5.0), where={"split": "test"})
    assert pairs.sentence1 == ["a cat"] and pairs.scores.tolist() == [2.0]
    assert [b.split(": ")[0].rsplit(":", 1)[1] for b in pairs.bad_rows] == ["2", "3", "4", "6"]
    assert "outside the scale" in pairs.bad_rows[2] and "not a number" in pairs.bad_rows[3]
    with pytest.raises(DataError, match="no usable pairs"):
        read_pairs_jsonl(path, "toy", (0.0, 5.0), where={"split": "dev"})


@pytest.mark.skipif(not (SHARED_DATA / "biosses" / "biosses.jsonl").is_file(), reason="shared data not present")
def test_shared_readers_know_the_scales() -> None:
    assert len(read_stsb(SHARED_DATA, "test")) == 1379 and read_stsb(SHARED_DATA, "dev", limit=5).scale == (0.0, 5.0)
    sick = read_sick(SHARED_DATA, "test")
    assert len(sick) == 4906 and sick.scale == (1.0, 5.0)
    assert len(read_biosses(SHARED_DATA)) == 100 and len(read_biosses(SHARED_DATA, folds=[0, 1])) == 20
