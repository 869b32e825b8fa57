"""The classification evaluation task: frozen encoder + MLP head, and a KNN baseline, per dataset x encoder.

Each split is encoded once; the head (depth 2 by default) is trained in-process on
the cached vectors and the epoch with the best dev accuracy is kept
(`lmplatform.objectives.classifier.frozen_head.train_frozen_head`, the fast
path of the `classifier` objective with `freeze_encoder=true`). The fine-tuned setting needs Ray Train:
`lmplatform.evaluation.frozen_vs_finetuned`.
Test examples whose label never occurs in train cannot be predicted; they are
left out and counted (`test_unknown_label`).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.data.labelled_texts import merge_rare_labels, read_labelled_texts
from lmplatform.data.readers import DataError
from lmplatform.evaluation.config import ClassificationDataset, ClassificationTask, ClassifierHeadConfig
from lmplatform.evaluation.metrics.classification import TABLE_COLUMNS, classification_metrics
from lmplatform.evaluation.plots import artifact_name, confusion_matrix_png
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from lmplatform.markdown import markdown_table

logger = logging.getLogger(__name__)
Split = tuple[list[str], list[str]]  # texts, labels


def read_classification_splits(ds: ClassificationDataset) -> tuple[dict[str, Split], list[str]]:
    """{"train", "test"[, "dev"]} -> (texts, labels), and the bad rows (file:line: reason)."""
    splits: dict[str, Split] = {}
    bad: list[str] = []
    if ds.path:
        data = read_labelled_texts(ds.path, ds.name, ds.text_fields, ds.label_field, split_field=ds.split_field)
        bad += data.bad_rows
        for key, value in (("train", ds.train_split), ("dev", ds.dev_split), ("test", ds.test_split)):
            if value is not None:
                splits[key] = data.split(value)
        source = {key: f"{ds.path} ({ds.split_field}={value!r})" for key, value in (("train", ds.train_split), ("test", ds.test_split))}
    else:
        for key in ("train", "dev", "test"):
            path = getattr(ds, key)
            if path:
                data = read_labelled_texts(path, f"{ds.name}-{key}", ds.text_fields, ds.label_field, split_field=None)
                splits[key], bad = (data.texts, data.labels), bad + data.bad_rows
        source = {"train": str(ds.train), "test": str(ds.test)}
    for key in ("train", "test"):
        if not splits[key][0]:
            raise DataError(f"dataset {ds.name!r}: no {key} rows in {source[key]}")
    if len(set(splits["train"][1])) < 2:
        raise DataError(f"dataset {ds.name!r}: the train rows in {source['train']} have fewer than 2 classes")
    if ds.min_class_size > 1:
        splits = merge_rare_classes(splits, ds.min_class_size)
    if ds.limit:
        splits = {key: (texts[: ds.limit], labels[: ds.limit]) for key, (texts, labels) in splits.items()}
    return splits, bad


def merge_rare_classes(splits: dict[str, Split], min_size: int, other: str = "Other") -> dict[str, Split]:
    """Classes with fewer than `min_size` examples in the train split become `other`, in every split
    (`merge_rare_labels`: held-out labels never decide which classes exist)."""
    names = [key for key, (texts, _) in splits.items() for _ in texts]
    merged = iter(merge_rare_labels([y for _, labels in splits.values() for y in labels], names, min_size, "train", other))
    return {key: (texts, [next(merged) for _ in labels]) for key, (texts, labels) in splits.items()}


def frozen_classification(encoder: Any, splits: dict[str, Split], head: ClassifierHeadConfig, knn_k: Optional[int],
                          output_dir: Path, title: str, batch_size: int = 32) -> list[dict[str, Any]]:
    """Rows for the frozen encoder + MLP head and (unless `knn_k` is None) KNN, scored on the test split.

    Each row holds the metrics of `classification_metrics`, sizes, the trainable
    parameter count and the path of its confusion-matrix PNG under `output_dir`.
    """
    import torch

    from lmplatform.models.classifier import KNNClassifier, count_parameters
    from lmplatform.objectives.classifier.frozen_head import train_frozen_head

    start = time.perf_counter()
    cached = {key: encoder.encode(texts, batch_size, normalize=False, show_progress=True) for key, (texts, _) in splits.items()}
    encode_seconds = round(time.perf_counter() - start, 2)
    dev = splits.get("dev", ([], []))
    classifier, info = train_frozen_head(encoder, *splits["train"], *dev, embeddings=cached, **head.model_dump())
    test_texts, test_labels = splits["test"]
    known = [i for i, y in enumerate(test_labels) if y in classifier.labels]
    gold = [test_labels[i] for i in known]
    # Score from the cached vectors: the head sees exactly what TextClassifier.predict_proba would compute.
    with torch.no_grad():
        proba = torch.softmax(classifier.model.head(torch.as_tensor(cached["test"][known])), -1).numpy()
    sizes = {"train": len(splits["train"][0]), "dev": len(dev[0]), "test": len(known),
             "test_unknown_label": len(test_labels) - len(known), "classes": len(classifier.labels)}
    rows = [_row("mlp", "frozen encoder + MLP head", gold, proba, classifier.labels, output_dir, title,
                 trainable_parameters=count_parameters(classifier.model.head), encode_seconds=encode_seconds,
                 best_epoch=info["best_epoch"], dev_accuracy=info["dev_accuracy"], **sizes)]
    if knn_k is not None:
        unit = {key: v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12) for key, v in cached.items()}
        knn = KNNClassifier(encoder, k=knn_k).fit(splits["train"][0], splits["train"][1], embeddings=unit["train"])
        rows.append(_row("knn", f"KNN (k={knn_k}) on embeddings", gold, knn.predict_proba([], embeddings=unit["test"][known]),
                         knn.labels, output_dir, title, trainable_parameters=0, **sizes))
    return rows


def _row(key: str, label: str, gold: Sequence[str], proba: np.ndarray, labels: list[str], output_dir: Path, title: str,
         **extra: Any) -> dict[str, Any]:
    metrics = classification_metrics(gold, proba, labels)
    png = confusion_matrix_png(gold, [labels[j] for j in proba.argmax(1)], labels,
                               output_dir / f"confusion_{artifact_name(title, key)}.png", title=f"{title} / {label}")
    return {"classifier": key, "setting": label, "metrics": metrics, "confusion_png": png.name, **extra}


def run_classification_task(task: ClassificationTask, output_dir: Path, models: Optional[ModelCache] = None) -> TaskResult:
    models = models or ModelCache()
    data = [(ds, *read_classification_splits(ds)) for ds in task.datasets]  # every file is read before any model is loaded
    results: list[dict[str, Any]] = []
    for ds, splits, bad in data:
        for spec in task.encoders:
            rows = frozen_classification(models.encoder(spec), splits, task.head, task.knn_k, output_dir,
                                         f"{ds.name}_{spec.name}", spec.batch_size)
            for row in rows:
                row.update({"dataset": ds.name, "encoder": spec.name, "model": spec.model, "bad_rows": len(bad),
                            "bad_row_examples": bad[:5]})
                logger.info("classification %s / %s / %s: %s", ds.name, spec.name, row["classifier"],
                            {k: round(row["metrics"][k], 4) for k in ("accuracy", "roc_auc", "f1_macro")})
            results += rows
    flat = {f"{r['dataset']}.{r['encoder']}.{r['classifier']}.{name}": value for r in results for name, value in r["metrics"].items()}
    artifacts = [output_dir / r["confusion_png"] for r in results]
    return TaskResult("classification", flat, classification_section(results), {"results": results}, artifacts)


def classification_section(results: list[dict[str, Any]]) -> str:
    """The report's classification section: a line per dataset x encoder x classifier, and how to read it."""
    header = ["dataset", "encoder", "classifier", "train", "test", "trainable params", *TABLE_COLUMNS]
    rows = [[r["dataset"], r["encoder"], r["setting"], str(r["train"]), str(r["test"]), f"{r['trainable_parameters']:,}",
             *(f"{r['metrics'][c]:.4f}" for c in TABLE_COLUMNS)] for r in results]
    unknown = sum(r["test_unknown_label"] for r in results if r["classifier"] == "mlp")
    lines = ["## Classification", "", markdown_table(header, rows)]
    lines += ["", "Frozen encoder; the MLP head is trained on cached embeddings and the best dev-accuracy epoch kept. ROC-AUC: "
              "binary, or the macro mean of one-vs-rest AUCs. Confusion matrices: confusion_*.png. "
              f"Test examples left out because their label is absent from train: {unknown}."]
    return "\n".join(lines) + "\n"
