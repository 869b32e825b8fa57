"""The untrained baseline of the KNN evaluation: the same protocol on the same folds, and per-fold gains."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmplatform.evaluation.relations import RelationEvalConfig, run_cross_validation
from tests.graph.synthetic import write_synthetic_ade


def _perturbed_copy(tiny_bert: Path, folder: Path) -> Path:
    """A second encoder whose word space differs from the tiny BERT's (a stand-in for a trained one)."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(tiny_bert))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.encoder.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=generator))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny_bert)).save_pretrained(folder)
    return folder


def test_baseline_rows_match_a_separate_run_of_the_baseline_and_gains_are_per_fold(tiny_bert: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data, folds = write_synthetic_ade(tmp_path / "ade.jsonl", n=40)
    trained = str(_perturbed_copy(tiny_bert, tmp_path / "trained"))
    common = dict(data_path=str(data), folds_file=str(folds), tsne=False, max_seq_length=32, k_candidates=[1, 3])
    with_baseline = run_cross_validation(RelationEvalConfig(ner_model=trained, baseline_model=str(tiny_bert), **common),
                                         parallel=False)
    alone = run_cross_validation(RelationEvalConfig(ner_model=str(tiny_bert), **common), parallel=False)
    for key in ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1", "k_ner", "k_re"):  # k too: the same validation split
        assert with_baseline["knn_baseline"][key] == alone["knn"][key]
    folds_run = with_baseline["per_fold"]
    assert len(folds_run) == 2
    for key in ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1"):
        gains = [f["knn"][key] - f["knn_baseline"][key] for f in folds_run]
        assert with_baseline["knn_gain"][key]["mean"] == pytest.approx(sum(gains) / 2)
        # the std of the per-fold differences, not a difference of stds
        assert with_baseline["knn_gain"][key]["std"] == pytest.approx(abs(gains[0] - gains[1]) / 2 ** 0.5)
    assert any(with_baseline["knn_gain"][key]["mean"] != 0 for key in ("ner_macro_f1", "re_macro_f1"))
    assert "knn_baseline" not in alone and "knn_gain" not in alone


@pytest.mark.parametrize("value", ["tpu", "cuda\x00", "cpu\ud800"])
def test_a_bad_evaluation_device_is_refused_naming_the_field(value: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="device"):
        RelationEvalConfig(data_path="ade.jsonl", folds_file="folds.json", device=value)
