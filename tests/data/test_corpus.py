import json
from pathlib import Path

import pytest

from lmplatform.config.schema import DataConfig
from lmplatform.data.corpus import TRAIN, VALIDATION, local_documents, scan_corpus
from lmplatform.data.readers import DataError


def _write(path: Path, rows: list[object]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def test_bad_rows_are_skipped_counted_and_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [{"text": f"doc number {i}"} for i in range(20)] + [
        "{oops", {"text": "   "}, {"body": "wrong field"}, {"text": None}, {"text": 3},
    ])
    report = scan_corpus(DataConfig(train_paths=[str(path)], validation_fraction=0.2), use_ray=False).report
    assert report.rows_read == 25
    assert report.train_documents + report.validation_documents == 20
    assert report.bad_total == 5
    assert report.bad_rows == {
        "not_valid_json": 1, "empty_document": 1, "missing_text_field": 1, "is_null": 1,
        "text_field_'text'_is_int,_not_a_string": 1,
    }
    assert any(e.startswith(f"{path}:21:") for e in report.bad_examples)
    assert "skipped 5 bad row(s)" in report.summary()
    assert report.metrics()["data/bad_rows"] == 5


def test_fail_mode_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [{"text": "fine"}, {"text": ""}])
    with pytest.raises(DataError, match=r"c.jsonl:2: empty document"):
        scan_corpus(DataConfig(train_paths=[str(path)], on_bad_row="fail"), use_ray=False)


def test_non_utf8_row_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b"good line one\nbad \xff\xfe line\ngood line two\n")
    report = scan_corpus(DataConfig(train_paths=[str(path)], validation_fraction=0.0), use_ray=False).report
    assert report.train_documents == 2 and report.bad_rows == {"not_valid_utf8": 1}


def test_empty_corpus_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [{"text": ""}, "{bad"])
    with pytest.raises(DataError, match="no usable training documents.*2 rows read, 2 bad"):
        scan_corpus(DataConfig(train_paths=[str(path)]), use_ray=False)


def test_missing_field_config_is_reported_per_row(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [{"body": "x"}])
    with pytest.raises(DataError, match="missing text field 'text' \\(fields: body\\)"):
        scan_corpus(DataConfig(train_paths=[str(path)]), use_ray=False)


def test_split_is_deterministic_and_order_independent(tmp_path: Path) -> None:
    docs = [{"text": f"report {i} about disk {i % 7}"} for i in range(400)]
    a = _write(tmp_path / "a.jsonl", docs)
    b = _write(tmp_path / "b.jsonl", list(reversed(docs)))
    cfg_a = DataConfig(train_paths=[str(a)], validation_fraction=0.25, seed=3)
    cfg_b = DataConfig(train_paths=[str(b)], validation_fraction=0.25, seed=3)
    val_a = set(local_documents(scan_corpus(cfg_a, use_ray=False), VALIDATION))
    val_b = set(local_documents(scan_corpus(cfg_b, use_ray=False), VALIDATION))
    assert val_a == val_b
    assert 60 < len(val_a) < 140  # 25% of 400, hash noise allowed
    other_seed = set(local_documents(scan_corpus(cfg_a.model_copy(update={"seed": 4}), use_ray=False), VALIDATION))
    assert other_seed != val_a


def test_dedup_and_cleaning(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl",
                  [{"text": "disk  full"}, {"text": "disk full"}, {"text": "disk\tfull\r"}, {"text": "other"}])
    corpus = scan_corpus(DataConfig(train_paths=[str(path)], validation_fraction=0.0, dedup=True), use_ray=False)
    assert corpus.report.duplicates_removed == 2
    assert sorted(local_documents(corpus, TRAIN)) == ["disk full", "other"]
    kept = scan_corpus(DataConfig(train_paths=[str(path)], validation_fraction=0.0), use_ray=False)
    assert kept.report.train_documents == 4


def test_max_documents_and_explicit_validation(tmp_path: Path) -> None:
    train = _write(tmp_path / "t.jsonl", [{"text": f"t{i}"} for i in range(50)])
    val = _write(tmp_path / "v.jsonl", [{"text": f"v{i}"} for i in range(7)])
    corpus = scan_corpus(DataConfig(train_paths=[str(train)], validation_paths=[str(val)], max_documents=10), use_ray=False)
    assert (corpus.report.train_documents, corpus.report.validation_documents) == (10, 7)
    assert corpus.report.truncated == 40
    assert sorted(local_documents(corpus, VALIDATION)) == sorted(f"v{i}" for i in range(7))


def test_text_fields_read_several_columns_as_documents(tmp_path: Path) -> None:
    # STS-style pairs and GLUE-style sentences together; a row with none of the columns is one bad row
    pairs = _write(tmp_path / "pairs.jsonl", [{"sentence1": "a plane takes off", "sentence2": "an airplane is taking off"},
                                              {"sentence1": "a man plays a flute", "sentence2": None}])
    single = _write(tmp_path / "single.jsonl", [{"sentence": "a charming journey"}, {"label": 1}])
    cfg = DataConfig(train_paths=[str(pairs), str(single)], text_fields=["sentence", "sentence1", "sentence2"],
                     validation_fraction=0.0)
    corpus = scan_corpus(cfg, use_ray=False)
    assert corpus.report.rows_read == 4
    assert sorted(local_documents(corpus, TRAIN)) == [
        "a charming journey", "a man plays a flute", "a plane takes off", "an airplane is taking off"]
    assert corpus.report.bad_rows == {"is_null": 1, "missing_text_field": 1}
    assert any("missing text fields ['sentence', 'sentence1', 'sentence2'] (fields: label)" in e
               for e in corpus.report.bad_examples)
    # without text_fields, text_field alone is read, as before
    with pytest.raises(DataError, match="no usable training documents"):
        scan_corpus(DataConfig(train_paths=[str(pairs)], validation_fraction=0.0), use_ray=False)
