"""Classification metrics against hand-computed values, the confusion PNG and the dataset readers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lmplatform.data.readers import DataError
from lmplatform.evaluation.classification import (
    classification_metrics,
    confusion_matrix_png,
    merge_rare_labels,
    read_asrs,
    read_demo_reports,
    read_labelled_texts,
    settings_table,
)
from tests.conftest import SHARED_DATA

REPO = Path(__file__).resolve().parents[2]



def test_binary_metrics_by_hand() -> None:
    y = ["pos", "neg", "pos", "neg"]
    proba = np.array([[0.2, 0.8], [0.6, 0.4], [0.7, 0.3], [0.9, 0.1]])  # columns: neg, pos
    m = classification_metrics(y, proba, ["neg", "pos"])
    assert m["accuracy"] == 0.75  # third example wrong
    # AUC: positives score 0.8, 0.3; negatives 0.4, 0.1 -> pairs won: (0.8>0.4, 0.8>0.1, 0.3<0.4, 0.3>0.1) = 3/4
    assert m["roc_auc"] == pytest.approx(0.75)
    # pos: P=1/1, R=1/2, F1=2/3; neg: P=2/3, R=1, F1=0.8 -> macro F1 = (2/3+0.8)/2
    assert m["f1_macro"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert m["precision_macro"] == pytest.approx((1 + 2 / 3) / 2)
    assert m["recall_weighted"] == pytest.approx(0.75)  # weighted recall equals accuracy


def test_multiclass_auc_is_macro_one_vs_rest_and_skips_undefined_classes() -> None:
    from sklearn.metrics import roc_auc_score

    labels = ["a", "b", "c", "d"]
    rng = np.random.default_rng(0)
    y = ["a", "b", "c", "a", "b", "c", "a", "c"]  # "d" never occurs: its AUC is undefined
    proba = rng.dirichlet(np.ones(4), size=len(y))
    m = classification_metrics(y, proba, labels)
    ids = np.array([labels.index(v) for v in y])
    expected = np.mean([roc_auc_score(ids == c, proba[:, c]) for c in range(3)])
    assert m["roc_auc"] == pytest.approx(expected) and m["roc_auc_classes"] == 3
    with pytest.raises(ValueError, match="not among"):
        classification_metrics(["z"], proba[:1], labels)
    with pytest.raises(ValueError, match="proba must be"):
        classification_metrics(y, proba[:, :3], labels)


def test_confusion_png_and_table(tmp_path: Path) -> None:
    png = confusion_matrix_png(["a", "b", "b"], ["a", "a", "b"], ["a", "b"], tmp_path / "cm.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = settings_table([{"setting": "frozen", "trainable_parameters": 1234, "accuracy": 0.5}], ["accuracy"])
    assert "| frozen | 1,234 | 0.5000 |" in table


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
    from lmplatform.evaluation.classification import read_medical_abstracts

    med = read_medical_abstracts(SHARED_DATA)
    assert len(med.texts) == 2888 and len(set(med.labels)) == 5 and len(med.split("test")[0]) == 576
    asrs = read_asrs(SHARED_DATA)
    assert len(asrs.texts) == 926 - 36 and len(asrs.bad_rows) == 36
    # 10 or more training reports (of 556): the four largest problems; the other 7 are merged
    assert set(asrs.labels) == {"Human Factors", "Ambiguous", "Procedure", "Aircraft", "Other"}
