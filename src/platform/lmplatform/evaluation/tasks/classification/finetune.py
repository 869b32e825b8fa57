"""`finetune_classifier`: encoder + head fine-tuned in this process, by the `classifier` objective's recipe.

The classification task's fine-tuned rows and few-shot points need many small runs (3 seeds x 4 sample
sizes per dataset and encoder), each on a few dozen to a few thousand texts: a Ray Train job per run would
cost more in start-up than in training. So the run is the one `lmp train` would make (the classifier
recipe, its loss and class weights, the optimiser, schedule and generic `Trainer`), driven in this
process the way the loop's own tests drive it. `frozen_vs_finetuned.py` runs the same objective on Ray Train.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch

from lmplatform.evaluation.tasks.classification.config import ClassifierHeadConfig, FinetuneConfig
from lmplatform.models.classifier import TextClassifier
from lmplatform.objectives.classifier.objective import record_classes
from lmplatform.objectives.run_config import load_run_config
from lmplatform.objectives.trainer import build_trainer
from lmplatform.train.ingest import resume_batches


class _MetricsOnly:
    """A `Reporter` that keeps the metrics and drops checkpoints: the model is used in memory, then thrown away."""

    def __init__(self) -> None:
        self.reports: list[dict[str, float]] = []

    def report(self, metrics: dict[str, float], checkpoint_dir: Optional[Path] = None,
               checkpoint_name: Optional[str] = None) -> None:
        self.reports.append(dict(metrics))


def _run_config(model: str, labels: list[str], counts: dict[int, int], head: ClassifierHeadConfig,
                settings: FinetuneConfig, seed: int) -> Any:
    cfg = load_run_config(None, [
        f"model.name_or_path={model}", f"model.max_seq_length={settings.max_seq_length}",
        "data.train_paths=[in-memory]",  # the texts come from the evaluation task, not from files
        "objective.name=classifier", "objective.freeze_encoder=false", f"objective.head_hidden={head.hidden}",
        f"objective.head_depth={head.depth}", f"objective.head_dropout={settings.head_dropout}",
        f"objective.class_balance={head.class_balance}", f"optim.lr={settings.lr}",
        f"optim.batch_size={settings.batch_size}", f"optim.warmup_ratio={settings.warmup_ratio}", f"optim.seed={seed}",
        f"optim.precision={settings.precision}", "checkpoint.every_n_steps=1000000000",
        "tracking.log_every_n_steps=1000000000", "tracking.register_model=false",
        *([f"objective.head_lr={settings.head_lr}"] if settings.head_lr is not None else []),
    ])
    record_classes(cfg, labels, counts)  # what the driver hands Ray Train workers: label order, class weights
    return cfg


def _batches(texts: Sequence[str], label_ids: Sequence[int], batch_size: int, seed: int,
             epoch: int) -> Iterator[dict[str, np.ndarray]]:
    """Ray-Data-style numpy batches of one epoch, shuffled by (seed, epoch) as the ingest shuffles shards."""
    order = np.random.default_rng([seed, epoch]).permutation(len(texts))
    text_column = np.asarray(texts, dtype=object)
    label_column = np.asarray(label_ids, dtype=np.int64)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        yield {"text": text_column[rows], "label": label_column[rows]}


def finetune_classifier(model: str, train_texts: Sequence[str], train_labels: Sequence[str], dev_texts: Sequence[str],
                        dev_labels: Sequence[str], head: ClassifierHeadConfig, settings: FinetuneConfig,
                        seed: Optional[int] = None) -> tuple[TextClassifier, dict[str, float]]:
    """Fine-tune `model` with an MLP head on the texts; returns the classifier and
    {"steps", "seconds", "val_accuracy" (on dev, when there is one; reported, never used to choose)}."""
    started = time.perf_counter()
    seed = settings.seed if seed is None else seed
    labels = sorted({str(y) for y in train_labels})
    index = {name: i for i, name in enumerate(labels)}
    train_ids = [index[str(y)] for y in train_labels]
    cfg = _run_config(model, labels, dict(Counter(train_ids)), head, settings, seed)
    steps = max(settings.min_steps, math.ceil(settings.epochs * math.ceil(len(train_texts) / settings.batch_size)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    reporter = _MetricsOnly()
    trainer = build_trainer(cfg, steps, device, 0, reporter=reporter)
    trainer.begin(None)
    # dev rows of a class absent from the training sample cannot be scored by this head: left out of val_accuracy
    dev = [(t, index[str(y)]) for t, y in zip(dev_texts, dev_labels) if str(y) in index]

    def train_batches(epoch: int, skip: int) -> Iterator[Any]:
        return resume_batches(_batches(train_texts, train_ids, settings.batch_size, seed, epoch), trainer.recipe.collate, skip)

    def validation_batches() -> Optional[Iterator[Any]]:
        if not dev:
            return None
        texts, ids = zip(*dev)
        return (trainer.recipe.collate({"text": np.asarray(texts[i : i + 64], dtype=object),
                                        "label": np.asarray(ids[i : i + 64], dtype=np.int64)}) for i in range(0, len(texts), 64))

    summary = trainer.fit(train_batches, validation_batches)
    classifier = TextClassifier(trainer.model.cpu().eval())  # TextClassifier tokenises on the CPU
    info = {"steps": float(steps), "seconds": round(time.perf_counter() - started, 2),
            "val_accuracy": float(summary.get("val_accuracy", float("nan")))}
    return classifier, info
