import gzip
import json
from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.graph.data import (
    Entity,
    align_words,
    bio_tags,
    decode_bio,
    parse_sentence,
    read_ade,
    read_folds,
    split_fold,
    words_weights,
)

GOOD = {"id": 7, "tokens": ["aspirin", "caused", "skin", "rash"],
        "entities": [{"type": "AE", "start": 2, "end": 4}, {"type": "Drug", "start": 0, "end": 1}],
        "relations": [{"type": "ADE", "head": 0, "tail": 1}]}


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_bad_sentences_are_skipped_and_reported_with_file_and_line(tmp_path: Path) -> None:
    bad_span = {**GOOD, "entities": [{"type": "AE", "start": 2, "end": 9}]}
    missing = {**GOOD, "relations": [{"type": "ADE", "head": 0, "tail": 5}]}
    empty = {**GOOD, "tokens": []}
    path = _write(tmp_path / "ade.jsonl", [GOOD, bad_span, missing, empty, "{not json", GOOD])
    sentences, report = read_ade(str(path))
    assert len(sentences) == 2 and report.bad_rows == 4
    assert report.bad_examples[0] == f"{path}:2: entity 0 span [2, 9) is out of range for 4 tokens"
    assert "relation 0 tail 5 points at a missing entity" in report.bad_examples[1] and ":3:" in report.bad_examples[1]
    assert "non-empty list" in report.bad_examples[2]
    with pytest.raises(DataError, match=r"ade.jsonl:2: entity 0 span"):
        read_ade(str(path), on_bad_row="fail")


def test_spert_json_array_and_folds(tmp_path: Path) -> None:
    array = tmp_path / "split_0_train.json.gz"
    with gzip.open(array, "wt") as handle:
        json.dump([{k: v for k, v in GOOD.items() if k != "id"} | {"orig_id": i} for i in range(3)], handle)
    sentences, report = read_ade(str(array))
    assert [s.id for s in sentences] == ["0", "1", "2"] and report.relations == 3
    rows = [{**GOOD, "id": i} for i in range(4)]
    path = _write(tmp_path / "ade.jsonl", rows)
    folds = tmp_path / "folds.json"
    folds.write_text(json.dumps({"split_0": {"train": [0, 1, 2], "test": [3]}}))
    train, test = split_fold(read_ade(str(path))[0], read_folds(folds), 0)
    assert [s.id for s in train] == ["0", "1", "2"] and [s.id for s in test] == ["3"]
    with pytest.raises(DataError, match="available: split_0"):
        split_fold(train, read_folds(folds), 4)


def test_bio_round_trip_and_overlaps() -> None:
    sentence = parse_sentence({**GOOD, "entities": GOOD["entities"] + [{"type": "AE", "start": 3, "end": 4}]}, "x")
    tags = bio_tags(sentence)
    assert tags == ["B-Drug", "O", "B-AE", "I-AE"]  # the nested AE loses to the first one listed
    assert decode_bio(tags) == [Entity(0, 1, "Drug"), Entity(2, 4, "AE")]
    assert decode_bio(["I-AE", "I-Drug", "O", "B-AE", "B-AE"]) == [Entity(0, 1, "AE"), Entity(1, 2, "Drug"),
                                                                   Entity(3, 4, "AE"), Entity(4, 5, "AE")]


def test_words_map_to_sub_words(tiny_bert: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    aligned = align_words(tokenizer, [["hypercalcemia", "rash"]], max_length=32)
    first_word = aligned.word_positions[0][0]
    assert len(first_word) > 1 and first_word[0] == 1  # [CLS] at 0; a long word is several pieces
    assert words_weights(aligned.word_positions[0], [0], "first") == {1: 1.0}
    mean = words_weights(aligned.word_positions[0], [0, 1], "mean")
    assert sum(mean.values()) == pytest.approx(1.0) and len(mean) == len(first_word) + 1
    truncated = align_words(tokenizer, [["rash"] * 40], max_length=8)
    assert truncated.word_positions[0][-1] == [] and words_weights(truncated.word_positions[0], [39], "first") == {}
