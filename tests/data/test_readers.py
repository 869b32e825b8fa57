import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmplatform.data.readers import BadRow, DataError, Record, detect_format, expand_paths, read_rows


def test_formats_are_detected_by_extension() -> None:
    assert detect_format("a.jsonl") == "jsonl"
    assert detect_format("a.jsonl.gz") == "jsonl"
    assert detect_format("a.tsv") == "csv"
    assert detect_format("a.parquet") == "parquet"
    assert detect_format("notes.txt") == "text"
    assert detect_format("a.csv", "text") == "text"


def test_jsonl_bad_lines_carry_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{broken\n\n[1, 2]\n{"text": "caf\xe9"}\n')
    rows = list(read_rows(str(path), "jsonl"))
    assert isinstance(rows[0], Record) and rows[0].fields["text"] == "ok"
    bad = [r for r in rows if isinstance(r, BadRow)]
    assert [(b.line, b.reason.split(" (")[0]) for b in bad] == [
        (2, "not valid JSON"),
        (4, "expected a JSON object, got list"),
        (5, "not valid UTF-8"),
    ]
    assert str(bad[0]).startswith(f"{path}:2:")


def test_csv_and_tsv(tmp_path: Path) -> None:
    csv_path = tmp_path / "c.csv"
    csv_path.write_text('id,text\n1,"first, with comma"\n2,second\n3,x,extra\n')
    rows = list(read_rows(str(csv_path), "csv"))
    assert [r.fields["text"] for r in rows if isinstance(r, Record)] == ["first, with comma", "second"]
    assert [(r.line, "more columns" in r.reason) for r in rows if isinstance(r, BadRow)] == [(4, True)]
    tsv_path = tmp_path / "c.tsv"
    tsv_path.write_text("id\ttext\n1\ttab separated\n")
    assert list(read_rows(str(tsv_path), "csv"))[0].fields["text"] == "tab separated"


def test_parquet_and_text(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": ["a", "b", None]}), path)
    rows = list(read_rows(str(path), "parquet"))
    assert [r.fields["body"] for r in rows] == ["a", "b", None] and rows[2].line == 3
    text = tmp_path / "c.txt"
    text.write_text("one doc\nanother doc\n")
    assert [r.fields["text"] for r in read_rows(str(text), "text")] == ["one doc", "another doc"]


def test_corrupt_parquet_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        list(read_rows(str(path), "parquet"))


def test_missing_paths_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found: .*missing.jsonl"):
        expand_paths([str(tmp_path / "missing.jsonl")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty"):
        expand_paths([str(tmp_path / "empty")])
    (tmp_path / "shards").mkdir()
    for i in range(2):
        (tmp_path / "shards" / f"part{i}.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    assert [Path(p).name for p in expand_paths([str(tmp_path / "shards")])] == ["part0.jsonl", "part1.jsonl"]
