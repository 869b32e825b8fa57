import json
import random
from pathlib import Path

import pytest

from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.runner import run_evaluation

# Three classes with disjoint vocabularies: separable even for a random tiny BERT's mean-pooled vectors.
VOCAB = {
    "printing": "printer paper toner jam tray scanner copier ink".split(),
    "network": "vpn tunnel router dns packet latency firewall wifi".split(),
    "billing": "invoice payment refund charge receipt tax card price".split(),
}


def write_toy_set(path: Path, per_split: dict[str, int], seed: int = 0) -> str:
    rng = random.Random(seed)
    rows = [{"text": " ".join(rng.choices(words, k=rng.randint(4, 9))), "label": label, "split": split}
            for split, n in per_split.items() for label, words in VOCAB.items() for _ in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"text": "no label here", "split": "train"}\n')
    return str(path)


def test_classification_task_end_to_end(tiny_bert: Path, tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    data = write_toy_set(tmp_path / "toy.jsonl", {"train": 16, "dev": 6, "test": 8})
    cfg = load_evaluation_config(None, base={
        "name": "cls", "output_dir": str(tmp_path / "out"), "tracking": {"tracking_uri": mlflow_uri},
        "tasks": [{"task": "classification", "datasets": [{"name": "toy", "path": data}],
                   "encoders": [{"name": "tiny", "model": str(tiny_bert), "max_seq_length": 16}],
                   "head": {"hidden": 32, "epochs": 40, "lr": 0.01}, "knn_k": 3}],
    })
    result = run_evaluation(cfg)
    rows = json.loads(result.report_json.read_text())["tasks"]["classification"]["results"]
    assert [r["classifier"] for r in rows] == ["mlp", "knn"]
    mlp, knn = rows
    assert (mlp["train"], mlp["dev"], mlp["test"], mlp["classes"], mlp["bad_rows"]) == (48, 18, 24, 3, 1)
    for key in ("accuracy", "roc_auc", "f1_weighted", "precision_weighted", "recall_weighted", "f1_macro",
                "precision_macro", "recall_macro"):
        assert 0 <= mlp["metrics"][key] <= 1 and 0 <= knn["metrics"][key] <= 1, key
    assert mlp["metrics"]["accuracy"] > 0.6 and knn["metrics"]["accuracy"] > 0.6  # chance is 1/3
    assert mlp["metrics"]["roc_auc_classes"] == 3
    assert mlp["trainable_parameters"] == (32 * 32 + 32) + (32 * 3 + 3)  # the head only: 32 -> 32 -> 3
    for row in rows:
        assert (tmp_path / "out" / row["confusion_png"]).stat().st_size > 1000
    assert "| toy | tiny | frozen encoder + MLP head | 48 | 24 | 1,155 |" in result.report_md.read_text()
    run = MlflowClient(mlflow_uri).get_run(result.mlflow_run_id)
    assert run.data.metrics["eval.cls.classification.toy.tiny.mlp.accuracy"] == pytest.approx(mlp["metrics"]["accuracy"])
    artifacts = {a.path for a in MlflowClient(mlflow_uri).list_artifacts(result.mlflow_run_id, "evaluation/cls")}
    assert f"evaluation/cls/{mlp['confusion_png']}" in artifacts


def test_rare_classes_are_counted_on_the_train_split_only() -> None:
    from lmplatform.evaluation.tasks.classification.task import merge_rare_classes

    splits = {"train": (["a", "b", "c", "d"], ["x", "x", "x", "rare"]),
              "test": (["e", "f", "g", "h"], ["rare", "rare", "rare", "x"])}
    merged = merge_rare_classes(splits, min_size=2)
    # 'rare' has 4 examples over both splits but 1 in train: the held-out labels must not keep it alive
    assert merged == {"train": (["a", "b", "c", "d"], ["x", "x", "x", "Other"]),
                      "test": (["e", "f", "g", "h"], ["Other", "Other", "Other", "x"])}
