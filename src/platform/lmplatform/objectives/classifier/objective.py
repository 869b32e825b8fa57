"""Classification objective: cross-entropy on encoder + mean pooling + MLP head logits.

Wiring for Ray Train: `prepare_data` (driver) reads and validates the
labelled rows and records the resolved label list (and, for weighted_loss, the
class weights) in `cfg.objective`, which is what the workers receive and what
MLflow logs as params; `build_recipe` (worker) builds the model from
that config without touching the data files, which a worker on another node or in
another working directory may not see.
"""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.data.fields import labelled_text
from lmplatform.data.labelled import LabelledData, labelled_datasets, labelled_rows, read_labelled
from lmplatform.data.readers import DataError
from lmplatform.models.classifier import ClassifierModel, MLPHead, count_parameters
from lmplatform.models.encoder import Encoder
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.collate import TextCollator
from lmplatform.train.recipe import PreparedData, TrainingRecipe


class ClassificationObjective(nn.Module):
    """Cross-entropy, optionally class-weighted; reports batch accuracy."""

    def __init__(self, class_weights: Optional[torch.Tensor] = None):
        super().__init__()
        self.register_buffer("class_weights", class_weights if class_weights is not None else torch.empty(0))

    def forward(self, model: ClassifierModel, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = model(batch["input_ids"], batch["attention_mask"])
        weight = self.class_weights if self.class_weights.numel() else None
        loss = F.cross_entropy(logits, batch["labels"], weight=weight)
        # a detached 0-dim tensor: the loop reads it at logging time, not every micro-step
        accuracy = (logits.detach().argmax(-1) == batch["labels"]).float().mean()
        return loss, {"accuracy": accuracy}


class ClassificationEvaluator:
    """Validation loss and accuracy as (sum, count), which reduce exactly across workers.
    The caller sets eval and inference mode and places the batches (the training loop does)."""

    def __call__(self, model: ClassifierModel, batches: Iterable[dict[str, torch.Tensor]],
                 rank: int = 0) -> dict[str, tuple[float, float]]:
        loss_sum = correct = count = 0.0
        for batch in batches:
            logits = model(batch["input_ids"], batch["attention_mask"])
            loss_sum += float(F.cross_entropy(logits, batch["labels"], reduction="sum"))
            correct += float((logits.argmax(-1) == batch["labels"]).sum())
            count += len(batch["labels"])
        return {"loss": (loss_sum, count), "accuracy": (correct, count)} if count else {}


class LabelledCollator:
    def __init__(self, tokenizer: Any, max_length: int):
        self.text = TextCollator(tokenizer, max_length)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        features = self.text(batch)
        features["labels"] = torch.as_tensor(np.asarray(batch["label"], dtype=np.int64))
        return features


def read_classification_data(cfg: RunConfig) -> tuple[LabelledData, list[str]]:
    """Rows -> {text, label id}; the label list is config's or the sorted training labels."""
    objective = cfg.objective

    def extract(fields: dict[str, Any]) -> Union[dict[str, Any], str]:
        example = labelled_text(fields, [cfg.data.text_field], objective.label_field, cfg.data.clean)
        if isinstance(example, str):
            return example
        return {"text": example[0], "label_name": example[1]}

    data = read_labelled(cfg.data, extract, objective.split_field)
    labels = list(objective.labels) if objective.labels else sorted({ex["label_name"] for ex in data.train})
    index = {name: i for i, name in enumerate(labels)}
    for split in ("train", "validation"):
        kept = []
        for ex in getattr(data, split):
            if ex["label_name"] not in index:
                reason = f"{ex['source']}: label {ex['label_name']!r} not among the classes ({', '.join(labels)})"
                if cfg.data.on_bad_row == "fail":
                    raise DataError(f"bad row (data.on_bad_row=fail): {reason}")
                data.bad_rows["unknown_label"] = data.bad_rows.get("unknown_label", 0) + 1
                data.bad_examples.append(reason)
                continue
            ex["label"] = index[ex["label_name"]]
            kept.append(ex)
        setattr(data, split, kept)
    if len(labels) < 2:
        raise DataError(f"classification needs at least 2 classes in {objective.label_field!r}, found {labels}")
    return data, labels


def class_weights(counts: dict[int, int], num_classes: int) -> torch.Tensor:
    """n / (k * n_c): every class contributes equally to the expected loss (absent classes get weight 0)."""
    total = sum(counts.values())
    return torch.tensor([total / (num_classes * counts[c]) if counts.get(c) else 0.0 for c in range(num_classes)],
                        dtype=torch.float32)


def oversample(examples: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Repeat examples of smaller classes (random draws) up to the largest class's count."""
    rng = random.Random(seed)
    by_class: dict[int, list[dict[str, Any]]] = {}
    for ex in examples:
        by_class.setdefault(ex["label"], []).append(ex)
    target = max(len(v) for v in by_class.values())
    out: list[dict[str, Any]] = []
    for members in by_class.values():
        out.extend(members)
        out.extend(rng.choice(members) for _ in range(target - len(members)))
    rng.shuffle(out)
    return out


def _parameter_counts(cfg: RunConfig, num_classes: int) -> dict[str, float]:
    """Total and trainable parameters, from the model config on the meta device (no weights loaded)."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(resolve_model_path(cfg.model.name_or_path)))
    with torch.device("meta"):
        backbone = AutoModel.from_config(config)
    objective = cfg.objective
    head = MLPHead(config.hidden_size, num_classes, objective.head_hidden, objective.head_depth)
    encoder_n, head_n = count_parameters(backbone), count_parameters(head)
    return {"model/total_parameters": float(encoder_n + head_n),
            "model/trainable_parameters": float(head_n if objective.freeze_encoder else encoder_n + head_n)}


def record_classes(cfg: RunConfig, labels: list[str], counts: dict[int, int]) -> None:
    """Put what the workers need from the data (labels, class weights) into the config they receive."""
    objective = cfg.objective
    if objective.labels is None:
        objective.labels = labels
    if objective.class_balance == "weighted_loss" and objective.class_weights is None:
        objective.class_weights = [round(w, 6) for w in class_weights(counts, len(labels)).tolist()]
    if objective.class_weights is not None and len(objective.class_weights) != len(labels):
        raise DataError(f"objective.class_weights has {len(objective.class_weights)} values for {len(labels)} classes ({labels})")


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The labelled texts per split, read in this process; like `prepare_data`, it resamples the training texts
    when asked and records the classes in `cfg` (`record_classes`) for the recipe."""
    data, labels = read_classification_data(cfg)
    record_classes(cfg, labels, Counter(ex["label"] for ex in data.train))
    if cfg.objective.class_balance == "resample":
        data.train = oversample(data.train, cfg.optim.seed)
    return labelled_rows(data, ["text", "label"])


def prepare_data(cfg: RunConfig) -> PreparedData:
    data, labels = read_classification_data(cfg)
    train = oversample(data.train, cfg.optim.seed) if cfg.objective.class_balance == "resample" else data.train
    counts = Counter(ex["label"] for ex in data.train)
    params = _parameter_counts(cfg, len(labels))
    metrics = data.metrics() | params | {f"data/class_count/{labels[c]}": float(n) for c, n in sorted(counts.items())}
    summary = data.summary() + (
        f"\ndata: {len(labels)} classes: " + ", ".join(f"{labels[c]} {n}" for c, n in sorted(counts.items()))
        + f"\nmodel: {int(params['model/trainable_parameters']):,} trainable "
        f"of {int(params['model/total_parameters']):,} parameters"
        + (" (encoder frozen)" if cfg.objective.freeze_encoder else "")
    )
    data.train = train
    record_classes(cfg, labels, counts)
    return PreparedData(
        datasets=labelled_datasets(data, ["text", "label"]),
        train_examples=len(train),
        metrics=metrics,
        summary=summary,
        fingerprint=data.fingerprint,
        report=data.report() | {"labels": labels, "class_counts": {labels[c]: n for c, n in counts.items()}},
    )


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    objective = cfg.objective
    data = None
    labels = objective.labels
    if labels is None:  # called outside run_training (which fills it in on the driver)
        data, labels = read_classification_data(cfg)
    encoder = Encoder.from_pretrained(cfg.model.name_or_path, pooling=cfg.model.pooling, max_seq_length=cfg.model.max_seq_length)
    head = MLPHead(encoder.dim, len(labels), objective.head_hidden, objective.head_depth, objective.head_dropout)
    model = ClassifierModel(encoder, head, labels, freeze_encoder=objective.freeze_encoder)
    weights = None
    if objective.class_weights is not None:
        weights = torch.tensor(objective.class_weights, dtype=torch.float32)
    elif objective.class_balance == "weighted_loss":
        data = data or read_classification_data(cfg)[0]
        weights = class_weights(Counter(ex["label"] for ex in data.train), len(labels))
    print(f"[lmp] classifier: {count_parameters(model, trainable_only=True):,} trainable parameters "
          f"of {count_parameters(model):,}", flush=True)

    def export(trained: ClassifierModel, folder: Path) -> None:
        trained.save_pretrained(folder)

    return TrainingRecipe(
        model=model,
        objective=ClassificationObjective(weights),
        collate=LabelledCollator(encoder.tokenizer, cfg.model.max_seq_length),
        export=export,
        evaluate=ClassificationEvaluator(),
        learning_rates=head_learning_rates(model, objective.head_lr),
    )


def head_learning_rates(model: ClassifierModel, head_lr: Optional[float]) -> dict[str, float]:
    """{name of every head parameter: head_lr} for `TrainingRecipe.learning_rates`; {} without one."""
    if head_lr is None:
        return {}
    head = {id(p) for p in model.head.parameters()}
    return {name: head_lr for name, param in model.named_parameters() if id(param) in head}
