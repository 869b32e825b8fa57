"""The classification task's fine-tuned rows and few-shot curve, end to end with a tiny BERT."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.runner import run_evaluation
from tests.evaluation.tasks.classification.test_task import write_toy_set


def test_finetune_rows_and_few_shot_curve_are_reported_and_logged(tiny_bert: Path, tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    data = write_toy_set(tmp_path / "toy.jsonl", {"train": 12, "dev": 4, "test": 8})
    cfg = load_evaluation_config(None, base={
        "name": "cls", "output_dir": str(tmp_path / "out"), "tracking": {"tracking_uri": mlflow_uri},
        "tasks": [{"task": "classification", "datasets": [{"name": "toy", "path": data}],
                   "encoders": [{"name": "tiny", "model": str(tiny_bert), "max_seq_length": 16}],
                   "head": {"hidden": 32, "epochs": 20, "lr": 0.01}, "knn_k": 3,
                   "finetune": {"epochs": 2, "min_steps": 6, "lr": 0.001, "batch_size": 8, "max_seq_length": 16,
                                "precision": "bf16", "head_lr": 0.01},
                   "few_shot": {"shots": [2, "all"], "seeds": [13, 14]}}],
    })
    result = run_evaluation(cfg)
    details = json.loads(result.report_json.read_text())["tasks"]["classification"]
    rows = {r["classifier"]: r for r in details["results"]}
    assert list(rows) == ["mlp", "knn", "finetuned"]
    mlp, tuned = rows["mlp"], rows["finetuned"]
    assert tuned["test"] == mlp["test"] == 24 and tuned["train"] == 36
    # the encoder trains too: its parameters count, and the predictions are not the frozen head's
    assert tuned["trainable_parameters"] > 10 * mlp["trainable_parameters"]
    assert tuned["steps"] == 10  # 2 epochs of ceil(36 / 8) batches, above min_steps
    assert tuned["metrics"] != mlp["metrics"]
    for key in ("accuracy", "f1_macro", "roc_auc"):
        assert 0 <= tuned["metrics"][key] <= 1
    assert "| toy | tiny | fine-tuned encoder + MLP head | 36 | 24 |" in result.report_md.read_text()

    (curve,) = details["few_shot"]
    assert {(p["classifier"], p["shots"], p["seed"]) for p in curve["points"]} == {
        (c, n, s) for c in ("mlp", "knn", "finetuned") for n in (2, "all") for s in (13, 14)}
    assert {p["train"] for p in curve["points"] if p["shots"] == 2} == {6}  # 2 per class, 3 classes
    # the whole-split fine-tuned point with finetune.seed is the main row's run
    (reused,) = [p for p in curve["points"] if (p["classifier"], p["shots"], p["seed"]) == ("finetuned", "all", 13)]
    assert reused["accuracy"] == tuned["metrics"]["accuracy"]
    png = tmp_path / "out" / curve["png"]
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    assert "### Few-shot: toy / tiny" in result.report_md.read_text()
    client = MlflowClient(mlflow_uri)
    artifacts = {a.path for a in client.list_artifacts(result.mlflow_run_id, "evaluation/cls")}
    assert f"evaluation/cls/{curve['png']}" in artifacts and "evaluation/cls/report.md" in artifacts
    metrics = client.get_run(result.mlflow_run_id).data.metrics
    assert "eval.cls.classification.toy.tiny.few_shot.finetuned.2.accuracy_mean" in metrics
    assert "eval.cls.classification.toy.tiny.finetuned.f1_macro" in metrics


@pytest.mark.parametrize(("section", "value", "field"), [
    ("few_shot", {"shots": [0, 8]}, "shots"),
    ("few_shot", {"seeds": []}, "seeds"),
    ("finetune", {"lr": 0}, "lr"),
    ("finetune", {"head_lr": 2}, "head_lr"),
    ("finetune", {"precision": "bf16\ud800"}, "precision"),
])
def test_bad_finetune_and_few_shot_settings_name_the_field(section: str, value: dict, field: str) -> None:
    task = {"task": "classification", "datasets": [{"name": "toy", "train": "a.jsonl", "test": "b.jsonl"}],
            "encoders": [{"name": "tiny", "model": "default"}], section: value}
    with pytest.raises(ConfigError, match=field):
        load_evaluation_config(None, base={"tasks": [task]})
