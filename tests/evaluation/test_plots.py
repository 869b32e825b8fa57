"""The report's figures: each is a PNG where it was asked for, named from the labels it shows."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lmplatform.data.sts_pairs import STSPairs
from lmplatform.evaluation.plots import artifact_name, confusion_matrix_png, plot_recall_curves, plot_sts_scatter

PNG = b"\x89PNG\r\n\x1a\n"


def test_confusion_png(tmp_path: Path) -> None:
    png = confusion_matrix_png(["a", "b", "b"], ["a", "a", "b"], ["a", "b"], tmp_path / "sub" / "cm.png")
    assert png == tmp_path / "sub" / "cm.png" and png.read_bytes()[:8] == PNG


def test_recall_curves_one_png_per_dataset_and_scenario(tmp_path: Path) -> None:
    row = {"dataset": "d", "metrics": {"recall@1": 0.2, "recall@5": 0.6}}
    results = [{**row, "scenario": "s", "retriever": "bm25"}, {**row, "scenario": "s", "retriever": "dense"},
               {**row, "scenario": "t", "retriever": "bm25"}]
    paths = plot_recall_curves(results, [1, 5], tmp_path)
    assert [p.name for p in paths] == ["recall_at_k_d_s.png", "recall_at_k_d_t.png"]
    assert all(p.read_bytes()[:8] == PNG for p in paths)


def test_sts_scatter_a_panel_per_encoder(tmp_path: Path) -> None:
    pairs = STSPairs("d", ["a", "b"], ["c", "d"], np.array([1.0, 4.0]), (0.0, 5.0))
    encoders = [SimpleNamespace(name="x"), SimpleNamespace(name="y")]
    cosines = {("my set/1", "x"): np.array([0.1, 0.9]), ("my set/1", "y"): np.array([0.5, 0.4])}
    path = plot_sts_scatter("my set/1", pairs, encoders, cosines, tmp_path)
    assert path.name == "sts_scatter_my-set-1.png" and path.read_bytes()[:8] == PNG


def test_artifact_name_is_file_name_safe() -> None:
    assert artifact_name("org/model v2", "knn") == "org-model-v2_knn"
    assert artifact_name("///") == "x"
