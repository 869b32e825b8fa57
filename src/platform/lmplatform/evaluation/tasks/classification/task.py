"""The classification evaluation task: frozen encoder + MLP head, a KNN baseline and (with `finetune`) the
encoder fine-tuned with its head, per dataset x encoder; optionally a few-shot curve of each.

Each split is encoded once; the head (depth 2 by default) is trained in-process on
the cached vectors and the epoch with the best dev accuracy is kept
(`lmplatform.objectives.classifier.frozen_head.train_frozen_head`, the fast
path of the `classifier` objective with `freeze_encoder=true`). The fine-tuned rows run the same
objective with the encoder trainable (`lmplatform.evaluation.tasks.classification.finetune`); the Ray Train version of the
comparison is `lmplatform.jobs.frozen_vs_finetuned`.
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
from lmplatform.evaluation.plots import artifact_name, confusion_matrix_png, plot_few_shot_curve
from lmplatform.evaluation.tasks.classification.config import ClassificationDataset, ClassificationTask
from lmplatform.evaluation.tasks.classification.few_shot import few_shot_points, few_shot_table, summarize_points
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from lmplatform.markdown import markdown_table
from lmplatform.metrics.classification import TABLE_COLUMNS, classification_metrics

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
        source = {key: f"{ds.path} ({ds.split_field}={value!r})"
                  for key, value in (("train", ds.train_split), ("test", ds.test_split))}
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


class TaskClassifiers:
    """The task's classifiers for one dataset x encoder, each trainable on any subset of the training rows
    (the few-shot curve's samples) and scored on the same test rows.

    Every split is encoded once; the MLP head and the KNN read the cached vectors, the fine-tuned
    classifier (`finetune_classifier`) trains a copy of the encoder itself.
    """

    def __init__(self, encoder: Any, model: str, splits: dict[str, Split], task: ClassificationTask, batch_size: int = 32):
        self.encoder, self.model, self.splits, self.task = encoder, model, splits, task
        start = time.perf_counter()
        self.cached = {key: encoder.encode(texts, batch_size, normalize=False, show_progress=True)
                       for key, (texts, _) in splits.items()}
        self.encode_seconds = round(time.perf_counter() - start, 2)
        self.unit = {key: v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12) for key, v in self.cached.items()}
        train_classes = set(splits["train"][1])
        test_labels = splits["test"][1]
        self.known = [i for i, y in enumerate(test_labels) if y in train_classes]
        self.gold = [test_labels[i] for i in self.known]
        self.dev = splits.get("dev", ([], []))

    def keys(self) -> list[str]:
        return ["mlp"] + (["knn"] if self.task.knn_k is not None else []) + (["finetuned"] if self.task.finetune else [])

    def _train(self, rows: list[int]) -> Split:
        texts, labels = self.splits["train"]
        return [texts[i] for i in rows], [labels[i] for i in rows]

    def mlp(self, rows: list[int], seed: int) -> tuple[list[str], np.ndarray, dict[str, Any]]:
        import torch

        from lmplatform.models.classifier import count_parameters
        from lmplatform.objectives.classifier.frozen_head import train_frozen_head

        cached = {"train": self.cached["train"][rows]} | ({"dev": self.cached["dev"]} if "dev" in self.cached else {})
        settings = self.task.head.model_dump() | {"seed": seed}
        classifier, info = train_frozen_head(self.encoder, *self._train(rows), *self.dev, embeddings=cached, **settings)
        # Score from the cached vectors: the head sees exactly what TextClassifier.predict_proba would compute.
        with torch.no_grad():
            proba = torch.softmax(classifier.model.head(torch.as_tensor(self.cached["test"][self.known])), -1).numpy()
        return classifier.labels, proba, {"trainable_parameters": count_parameters(classifier.model.head),
                                          "best_epoch": info["best_epoch"], "dev_accuracy": info["dev_accuracy"]}

    def knn(self, rows: list[int], seed: int) -> tuple[list[str], np.ndarray, dict[str, Any]]:
        from lmplatform.models.classifier import KNNClassifier

        knn = KNNClassifier(self.encoder, k=self.task.knn_k).fit(*self._train(rows), embeddings=self.unit["train"][rows])
        return knn.labels, knn.predict_proba([], embeddings=self.unit["test"][self.known]), {"trainable_parameters": 0}

    def finetuned(self, rows: list[int], seed: int) -> tuple[list[str], np.ndarray, dict[str, Any]]:
        from lmplatform.evaluation.tasks.classification.finetune import finetune_classifier
        from lmplatform.models.classifier import count_parameters

        classifier, info = finetune_classifier(self.model, *self._train(rows), *self.dev, self.task.head, self.task.finetune,
                                               seed)
        test_texts = self.splits["test"][0]
        proba = classifier.predict_proba([test_texts[i] for i in self.known])
        return classifier.labels, proba, {"trainable_parameters": count_parameters(classifier.model, trainable_only=True),
                                          "steps": info["steps"], "train_seconds": info["seconds"],
                                          "dev_accuracy": info["val_accuracy"]}

    def scores(self, key: str, rows: list[int], seed: int) -> dict[str, float]:
        labels, proba, _ = getattr(self, key)(rows, seed)
        return classification_metrics(self.gold, proba, labels)


SETTINGS = {"mlp": "frozen encoder + MLP head", "knn": "KNN (k={k}) on embeddings", "finetuned": "fine-tuned encoder + MLP head"}


def task_rows(classifiers: TaskClassifiers, output_dir: Path, title: str) -> list[dict[str, Any]]:
    """Rows for every classifier of the task trained on the whole training split, scored on the test split.

    Each row holds the metrics of `classification_metrics`, sizes, the trainable parameter count and the
    path of its confusion-matrix PNG under `output_dir`. Seeds: `head.seed` (MLP), `finetune.seed`.
    """
    task = classifiers.task
    everything = list(range(len(classifiers.splits["train"][0])))
    sizes = {"train": len(everything), "dev": len(classifiers.dev[0]), "test": len(classifiers.known),
             "test_unknown_label": len(classifiers.splits["test"][0]) - len(classifiers.known),
             "classes": len(set(classifiers.splits["train"][1])), "encode_seconds": classifiers.encode_seconds}
    seeds = {"mlp": task.head.seed, "knn": 0, "finetuned": task.finetune.seed if task.finetune else 0}
    rows = []
    for key in classifiers.keys():
        labels, proba, extra = getattr(classifiers, key)(everything, seeds[key])
        rows.append(_row(key, SETTINGS[key].format(k=task.knn_k), classifiers.gold, proba, labels, output_dir, title,
                         **extra, **sizes))
    return rows


def few_shot_section(classifiers: TaskClassifiers, main_rows: list[dict[str, Any]], output_dir: Path,
                     title: str) -> dict[str, Any]:
    """The few-shot curve of every classifier: points, mean ± std per size, table and PNG.

    The fine-tuned point on the whole training split with `finetune.seed` is the main row's run, reused
    (the same data, seed and settings would train the same model again)."""
    task = classifiers.task
    reuse = {row["classifier"]: row["metrics"] for row in main_rows}

    def scorer(key: str) -> Any:
        def score(rows: list[int], seed: int) -> dict[str, float]:
            whole = len(rows) == len(classifiers.splits["train"][0])
            if key == "finetuned" and whole and seed == task.finetune.seed:
                return reuse[key]
            return classifiers.scores(key, rows, seed)
        return score

    points = few_shot_points({key: scorer(key) for key in classifiers.keys()}, classifiers.splits["train"][1],
                             task.few_shot.shots, task.few_shot.seeds)
    summary = summarize_points(points)
    names = {key: SETTINGS[key].format(k=task.knn_k) for key in classifiers.keys()}
    png = plot_few_shot_curve([r | {"classifier": names[r["classifier"]]} for r in summary], title,
                              output_dir / f"few_shot_{artifact_name(title)}.png")
    return {"points": points, "summary": summary, "png": png.name, "table": few_shot_table(summary, names)}


def _row(key: str, label: str, gold: Sequence[str], proba: np.ndarray, labels: list[str], output_dir: Path, title: str,
         **extra: Any) -> dict[str, Any]:
    metrics = classification_metrics(gold, proba, labels)
    png = confusion_matrix_png(gold, [labels[j] for j in proba.argmax(1)], labels,
                               output_dir / f"confusion_{artifact_name(title, key)}.png", title=f"{title} / {label}")
    return {"classifier": key, "setting": label, "metrics": metrics, "confusion_png": png.name, **extra}


def run(task: ClassificationTask, output_dir: Path, models: Optional[ModelCache] = None) -> TaskResult:
    models = models or ModelCache()
    data = [(ds, *read_classification_splits(ds)) for ds in task.datasets]  # every file is read before any model is loaded
    results: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    for ds, splits, bad in data:
        for spec in task.encoders:
            title = f"{ds.name}_{spec.name}"
            classifiers = TaskClassifiers(models.encoder(spec), spec.model, splits, task, spec.batch_size)
            rows = task_rows(classifiers, output_dir, title)
            for row in rows:
                row.update({"dataset": ds.name, "encoder": spec.name, "model": spec.model, "bad_rows": len(bad),
                            "bad_row_examples": bad[:5]})
                logger.info("classification %s / %s / %s: %s", ds.name, spec.name, row["classifier"],
                            {k: round(row["metrics"][k], 4) for k in ("accuracy", "roc_auc", "f1_macro")})
            results += rows
            if task.few_shot is not None:
                curves.append({"dataset": ds.name, "encoder": spec.name} | few_shot_section(classifiers, rows, output_dir, title))
    flat = {f"{r['dataset']}.{r['encoder']}.{r['classifier']}.{name}": value
            for r in results for name, value in r["metrics"].items()}
    for curve in curves:
        for r in curve["summary"]:
            for name, value in r.items():
                if name.endswith(("_mean", "_std")) and name != "train_mean":
                    flat[f"{curve['dataset']}.{curve['encoder']}.few_shot.{r['classifier']}.{r['shots']}.{name}"] = value
    artifacts = [output_dir / r["confusion_png"] for r in results] + [output_dir / c["png"] for c in curves]
    return TaskResult("classification", flat, classification_section(results, curves), {"results": results, "few_shot": curves},
                      artifacts)


def classification_section(results: list[dict[str, Any]], curves: Sequence[dict[str, Any]] = ()) -> str:
    """The report's classification section: a line per dataset x encoder x classifier, how to read it, and
    the few-shot tables."""
    header = ["dataset", "encoder", "classifier", "train", "test", "trainable params", *TABLE_COLUMNS]
    rows = [[r["dataset"], r["encoder"], r["setting"], str(r["train"]), str(r["test"]), f"{r['trainable_parameters']:,}",
             *(f"{r['metrics'][c]:.4f}" for c in TABLE_COLUMNS)] for r in results]
    unknown = sum(r["test_unknown_label"] for r in results if r["classifier"] == "mlp")
    lines = ["## Classification", "", markdown_table(header, rows)]
    lines += ["", "Frozen encoder: the MLP head is trained on cached embeddings and the best dev-accuracy epoch kept. "
              "Fine-tuned: encoder and head trained together for a fixed budget, the last step kept. ROC-AUC: "
              "binary, or the macro mean of one-vs-rest AUCs. Confusion matrices: confusion_*.png. "
              f"Test examples left out because their label is absent from train: {unknown}."]
    for curve in curves:
        lines += ["", f"### Few-shot: {curve['dataset']} / {curve['encoder']}", "", curve["table"], "",
                  f"Mean ± std over seeds of the test-split scores; each seed draws one sample per size, shared by "
                  f"all classifiers (a class with fewer examples gives all of them). Curve: {curve['png']}."]
    return "\n".join(lines) + "\n"
