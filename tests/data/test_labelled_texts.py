"""The labelled-text readers: bad rows by file and line, splits, rare classes merged on train counts, the shared sets."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.data.labelled_texts import (
    merge_rare_labels,
    read_asrs,
    read_demo_reports,
    read_labelled_texts,
    read_medical_abstracts,
)
from lmplatform.data.readers import DataError
from tests.conftest import SHARED_DATA

REPO = Path(__file__).resolve().parents[2]


def test_readers(tmp_path: Path) -> None:
    demo = read_demo_reports(REPO / "data" / "demo" / "reports.jsonl")
    assert len(demo.texts) == 320 and len(set(demo.labels)) == 8 and not demo.bad_rows
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join([json.dumps({"t": "disk full", "y": "storage", "split": "train"}), "{bad",
                               json.dumps({"t": "", "y": "x"}), json.dumps({"t": "vpn", "y": None})]) + "\n")
    data = read_labelled_texts(path, "toy", ["t"], "y")
    assert data.texts == ["disk full"] and data.split("train") == (["disk full"], ["storage"])
    assert [b.split(": ")[0].rsplit(":", 1)[1] for b in data.bad_rows] == ["2", "3", "4"]
    with pytest.raises(DataError, match="no usable rows"):
        read_labelled_texts(path, "toy", ["missing"], "y")


def test_rare_classes_are_counted_in_the_training_split_only(tmp_path: Path) -> None:
    # "bird" has 1 train report and 5 test ones: 6 in all, but too rare to learn from; "drone" is never trained on
    rows = ([("Human Factors", "train")] * 3 + [("bird", "train")] + [("bird", "test")] * 5 + [("drone", "test")] * 4
            + [("Human Factors", "test"), ("Human Factors", "dev")])
    folder = tmp_path / "asrs_nmac_reports"
    folder.mkdir()
    (folder / "reports.jsonl").write_text("".join(
        json.dumps({"narrative": f"report {i}", "primary_problem": label, "split": split}) + "\n"
        for i, (label, split) in enumerate(rows)))
    asrs = read_asrs(tmp_path, min_class_size=3)
    assert asrs.split("train")[1] == ["Human Factors"] * 3 + ["Other"]
    assert asrs.split("test")[1] == ["Other"] * 9 + ["Human Factors"]
    assert asrs.split("dev")[1] == ["Human Factors"]
    assert merge_rare_labels(["a", "b", "b"], ["train", "train", "train"], 2) == ["Other", "b", "b"]
    with pytest.raises(DataError, match="no rows in split 'train'"):
        merge_rare_labels(["a"], ["test"], 1)


@pytest.mark.skipif(not (SHARED_DATA / "asrs_nmac_reports" / "reports.jsonl").is_file(), reason="shared data not present")
def test_shared_readers() -> None:
    med = read_medical_abstracts(SHARED_DATA)
    assert len(med.texts) == 2888 and len(set(med.labels)) == 5 and len(med.split("test")[0]) == 576
    asrs = read_asrs(SHARED_DATA)
    assert len(asrs.texts) == 926 - 36 and len(asrs.bad_rows) == 36
    # 10 or more training reports (of 556): the four largest problems; the other 7 are merged
    assert set(asrs.labels) == {"Human Factors", "Ambiguous", "Procedure", "Aircraft", "Other"}
