"""Classification objective pieces: data reading with bad rows, class balance, loss and evaluator."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from lmplatform.data.readers import DataError
from lmplatform.objectives.classifier.objective import (
    ClassificationEvaluator,
    ClassificationObjective,
    build_recipe,
    class_weights,
    oversample,
    read_classification_data,
    record_classes,
)
from lmplatform.objectives.run_config import load_run_config


def _write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def _cfg(tiny_bert: Path, path: Path, *extra: str):
    return load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=16", f"data.train_paths={path}",
                                  "objective.name=classifier", "objective.split_field=split", *extra])


def test_reading_splits_labels_and_bad_rows(tiny_bert: Path, tmp_path: Path) -> None:
    rows = [{"text": f"disk {i}", "label": "storage", "split": "train"} for i in range(3)]
    rows += [{"text": "vpn down", "label": "network", "split": "train"}, {"text": "vpn", "label": "network", "split": "dev"},
             {"text": "x", "label": "network", "split": "test"}, {"text": "no label", "split": "train"}, "oops",
             {"text": "cert", "label": "security", "split": "dev"}]
    path = _write(tmp_path / "rows.jsonl", rows)
    data, labels = read_classification_data(_cfg(tiny_bert, path))
    assert labels == ["network", "storage"]
    assert [ex["label"] for ex in data.train] == [1, 1, 1, 0] and [ex["label"] for ex in data.validation] == [0]
    assert data.left_out == 1
    assert data.bad_rows == {"missing_label_field_'label'": 1, "not_valid_json": 1, "unknown_label": 1}
    assert any(f"{path}:9: label 'security'" in example for example in data.bad_examples)
    with pytest.raises(DataError, match=rf"{path}:7"):
        read_classification_data(_cfg(tiny_bert, path, "data.on_bad_row=fail"))
    with pytest.raises(DataError, match="at least 2 classes"):
        read_classification_data(_cfg(tiny_bert, _write(tmp_path / "one.jsonl", [{"text": "a", "label": "x", "split": "train"}])))


def test_class_balance() -> None:
    weights = class_weights({0: 6, 1: 2}, 3)
    assert weights.tolist() == pytest.approx([8 / 18, 8 / 6, 0.0])
    examples = [{"label": 0, "i": i} for i in range(6)] + [{"label": 1, "i": i} for i in range(2)]
    balanced = oversample(examples, seed=1)
    assert Counter(ex["label"] for ex in balanced) == {0: 6, 1: 6}
    assert {ex["i"] for ex in balanced if ex["label"] == 1} == {0, 1}


def test_recipe_trains_the_head_only_when_frozen(tiny_bert: Path, tmp_path: Path) -> None:
    rows = [{"text": f"disk full {i}", "label": "storage", "split": "train"} for i in range(4)]
    rows += [{"text": f"vpn tunnel down {i}", "label": "network", "split": "train"} for i in range(4)]
    path = _write(tmp_path / "rows.jsonl", rows)
    recipe = build_recipe(_cfg(tiny_bert, path, "objective.freeze_encoder=true", "objective.head_hidden=8",
                                          "objective.class_balance=weighted_loss"))
    head_params = {id(p) for p in recipe.model.head.parameters()}
    assert {id(p) for p in recipe.parameters()} == head_params
    batch = recipe.collate({"text": [r["text"] for r in rows], "label": [1] * 4 + [0] * 4})
    recipe.model.eval()  # no head dropout, so the two forward passes agree
    loss, metrics = recipe.objective(recipe.model, batch)
    with torch.no_grad():
        manual = torch.nn.functional.cross_entropy(recipe.model(batch["input_ids"], batch["attention_mask"]), batch["labels"])
    assert float(loss.detach()) == pytest.approx(float(manual), rel=1e-4)  # equal class counts: weights are all 1
    assert 0.0 <= metrics["accuracy"] <= 1.0
    evaluated = ClassificationEvaluator()(recipe.model, [batch, batch])
    assert evaluated["accuracy"][1] == 16 and evaluated["loss"][0] / 16 == pytest.approx(float(manual), rel=1e-4)
    assert isinstance(recipe.objective, ClassificationObjective)


def test_head_lr_gives_the_head_its_own_rate_and_leaves_the_encoder_at_optim_lr(tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.train.optim import build_optimizer

    rows = [{"text": f"disk full {i}", "label": "storage", "split": "train"} for i in range(2)]
    rows += [{"text": f"vpn down {i}", "label": "network", "split": "train"} for i in range(2)]
    cfg = _cfg(tiny_bert, _write(tmp_path / "rows.jsonl", rows), "objective.head_hidden=8", "objective.head_lr=0.01",
               "optim.lr=2e-5")
    recipe = build_recipe(cfg)
    names = {id(p): n for n, p in recipe.model.named_parameters()}
    optimizer = build_optimizer(recipe.parameters(), names, cfg.optim, recipe.learning_rates)
    rate = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    head = {id(p) for p in recipe.model.head.parameters()}
    encoder = {id(p) for p in recipe.model.encoder.parameters()}
    assert head and {rate[i] for i in head} == {0.01}
    assert encoder and {rate[i] for i in encoder} == {2e-5}
    assert build_recipe(_cfg(tiny_bert, tmp_path / "rows.jsonl")).learning_rates == {}  # unset: one shared rate
    with pytest.raises(Exception, match="head_lr"):
        _cfg(tiny_bert, tmp_path / "rows.jsonl", "objective.head_lr=0")


def test_workers_get_labels_and_weights_from_the_config_not_the_files(tiny_bert: Path, tmp_path: Path) -> None:
    rows = [{"text": f"disk {i}", "label": "storage", "split": "train"} for i in range(3)]
    rows += [{"text": "vpn down", "label": "network", "split": "train"}]
    path = _write(tmp_path / "rows.jsonl", rows)
    cfg = _cfg(tiny_bert, path, "objective.class_balance=weighted_loss", "objective.head_hidden=8")
    data, labels = read_classification_data(cfg)
    record_classes(cfg, labels, Counter(ex["label"] for ex in data.train))
    assert cfg.objective.labels == ["network", "storage"]
    assert cfg.objective.class_weights == pytest.approx([4 / 2, 4 / 6], abs=1e-6)
    path.unlink()  # a worker elsewhere may not see the data files at all
    recipe = build_recipe(cfg)
    assert recipe.model.labels == ["network", "storage"]
    assert recipe.objective.class_weights.tolist() == pytest.approx([2.0, 4 / 6], abs=1e-6)
    with pytest.raises(DataError, match="class_weights has 3 values for 2 classes"):
        record_classes(cfg.model_copy(update={"objective": cfg.objective.model_copy(update={"class_weights": [1.0, 1.0, 1.0]})}),
                       labels, {0: 1, 1: 3})
