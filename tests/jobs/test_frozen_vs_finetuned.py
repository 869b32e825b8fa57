"""Real Ray Train runs of the classifier (tiny BERT), frozen then fine-tuned, compared on a test set and logged to MLflow;
the table that sets them side by side."""
from __future__ import annotations

import json
import random

import pytest

from lmplatform.jobs.frozen_vs_finetuned import frozen_vs_finetuned, settings_table
from lmplatform.objectives.run_config import load_run_config

VOCAB = {
    "storage": "disk backup queue memory".split(),
    "network": "vpn tunnel network certificate".split(),
    "payments": "payment gateway invoice mobile".split(),
}


def _rows(n: int, seed: int, split: str) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = list(VOCAB)[i % 3]
        words = ([rng.choice(VOCAB[label]) for _ in range(4)]
                 + [rng.choice(["error", "failed", "user", "report"]) for _ in range(3)])
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": label, "split": split})
    return rows


def test_frozen_and_finetuned_classifiers_beat_chance(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    path = tmp_path / "tickets.jsonl"
    rows = _rows(96, 0, "train") + _rows(30, 1, "dev") + [{"text": "", "label": "storage", "split": "train"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    test = _rows(45, 2, "test")
    cfg = load_run_config(None, [
        f"model.name_or_path={tiny_bert}", "model.max_seq_length=16", f"data.train_paths={path}",
        "objective.name=classifier", "objective.split_field=split", "objective.head_hidden=32",
        "objective.class_balance=weighted_loss",
        "optim.batch_size=16", "optim.lr=5e-3", "optim.max_steps=24", "optim.warmup_ratio=0",
        "scaling.cpus_per_worker=1", f"checkpoint.storage_path={tmp_path / 'runs'}",
        f"tracking.tracking_uri={mlflow_uri}", "tracking.experiment=tests", "tracking.log_every_n_steps=8",
        "tracking.registered_model=tiny-classifier",
    ])
    study = frozen_vs_finetuned(cfg, [r["text"] for r in test], [r["label"] for r in test], tmp_path / "report")

    rows_by_setting = {row["setting"]: row for row in study["rows"]}
    frozen, tuned = rows_by_setting["frozen"], rows_by_setting["fine-tuned"]
    assert frozen["accuracy"] > 0.6 and tuned["accuracy"] > 0.6  # chance is 1/3
    assert frozen["roc_auc"] > 0.8 and frozen["roc_auc_classes"] == 3
    assert frozen["trainable_parameters"] == 32 * 32 + 32 + 32 * 3 + 3 < tuned["trainable_parameters"]
    assert "| frozen |" in study["markdown"] and (tmp_path / "report" / "classification_table.md").is_file()

    client = MlflowClient(mlflow_uri)
    run = client.get_run(frozen["mlflow_run_id"])
    assert run.data.tags["lmp.objective"] == "classifier" and run.data.tags["lmp.setting"] == "frozen"
    assert run.data.metrics["model/trainable_parameters"] == frozen["trainable_parameters"]
    assert run.data.metrics["data/bad_rows"] == 1 and run.data.metrics["data/validation_documents"] == 30
    assert run.data.metrics["test_accuracy"] == pytest.approx(frozen["accuracy"])
    val = [m.value for m in client.get_metric_history(frozen["mlflow_run_id"], "val_accuracy")]
    assert val[-1] > 0.6 and val[-1] > val[0]
    artifacts = {a.path for a in client.list_artifacts(frozen["mlflow_run_id"], "evaluation")}
    assert "evaluation/confusion_frozen.png" in artifacts
    model_files = {a.path for a in client.list_artifacts(frozen["mlflow_run_id"], "model")}
    assert {"model/classifier_head.pt", "model/labels.json"} <= model_files


def test_settings_table() -> None:
    table = settings_table([{"setting": "frozen", "trainable_parameters": 1234, "accuracy": 0.5}], ["accuracy"])
    assert "| frozen | 1,234 | 0.5000 |" in table
