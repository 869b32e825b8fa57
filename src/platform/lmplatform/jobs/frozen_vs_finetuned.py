"""The incident-report study: the classifier trained with its encoder frozen, then fine-tuned, compared on a test set.

Each setting is one Ray Train run of the `classifier` objective; its test metrics
(`metrics.classification.classification_metrics`) and confusion matrix go to its own MLflow run,
and the two settings side by side to `classification_table.{json,md}`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.evaluation.plots import confusion_matrix_png
from lmplatform.markdown import markdown_table
from lmplatform.metrics.classification import TABLE_COLUMNS, classification_metrics
from lmplatform.models.kind import CLASSIFIER
from lmplatform.objectives.registry import objective_spec, objective_specs
from lmplatform.tracking.mlflow_tracking import TrackedRun


def evaluate_classifier(classifier: Any, texts: Sequence[str], labels: Sequence[str], out_dir: Optional[Path] = None,
                        title: str = "") -> tuple[dict[str, float], Optional[Path]]:
    """Metrics of a fitted `TextClassifier`/`KNNClassifier`, and a confusion PNG when `out_dir` is given."""
    proba = classifier.predict_proba(list(texts))
    metrics = classification_metrics(labels, proba, classifier.labels)
    png = None
    if out_dir is not None:
        predicted = [classifier.labels[i] for i in proba.argmax(axis=1)]
        png = confusion_matrix_png(labels, predicted, classifier.labels, Path(out_dir) / f"confusion_{title or 'model'}.png",
                                   title=f"Confusion matrix {title}".strip())
    return metrics, png


def settings_table(rows: list[dict[str, Any]], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """One line per setting (frozen, fine-tuned): its trainable parameters and its metrics."""
    def cells(row: dict[str, Any]) -> list[str]:
        metrics = [f"{row[c]:.4f}" if isinstance(row.get(c), float) else str(row.get(c, "")) for c in columns]
        return [str(row["setting"]), f"{int(row.get('trainable_parameters', 0)):,}", *metrics]

    return markdown_table(["setting", "trainable params", *columns], [cells(row) for row in rows])


def frozen_vs_finetuned(cfg: Any, test_texts: Sequence[str], test_labels: Sequence[str], out_dir: str | Path,
                        parent_run_id: Optional[str] = None) -> dict[str, Any]:
    """Train the classifier twice on Ray Train (encoder frozen, then fine-tuned) and compare them on a test set.

    Each run's test metrics and confusion-matrix PNG are logged to its own MLflow run;
    returns {"rows": [...], "markdown": str, "runs": {setting: TrainingResult}} and writes
    `classification_table.{json,md}` under `out_dir`.
    """
    from lmplatform.jobs.train_run import run_training
    from lmplatform.models.classifier import TextClassifier

    if objective_spec(cfg.objective.name).model_kind != CLASSIFIER:
        raise ValueError(f"frozen_vs_finetuned needs a classifier objective (objective.name: "
                         f"{', '.join(s.name for s in objective_specs() if s.model_kind == CLASSIFIER)}), "
                         f"got {cfg.objective.name!r}")
    out_dir = Path(out_dir)
    rows: list[dict[str, Any]] = []
    runs = {}
    for setting, frozen in (("frozen", True), ("fine-tuned", False)):
        run_cfg = cfg.model_copy(update={"objective": cfg.objective.model_copy(update={"freeze_encoder": frozen})})
        result = run_training(run_cfg, parent_run_id=parent_run_id,
                              extra_tags={"lmp.study": "frozen_vs_finetuned", "lmp.setting": setting})
        classifier = TextClassifier.from_pretrained(result.model_dir)
        metrics, png = evaluate_classifier(classifier, test_texts, test_labels, out_dir, title=setting)
        tracker = TrackedRun(result.tracking_uri, result.mlflow_run_id)
        tracker.log_metrics({f"test_{k}": v for k, v in metrics.items() if np.isfinite(v)})
        if png is not None:
            tracker.log_artifact(png, "evaluation")
        trainable = sum(p.numel() for p in classifier.model.head.parameters())
        if not frozen:
            trainable += sum(p.numel() for p in classifier.model.encoder.parameters())
        rows.append({"setting": setting, "trainable_parameters": trainable, "mlflow_run_id": result.mlflow_run_id, **metrics})
        runs[setting] = result
    table = settings_table(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "classification_table.json").write_text(json.dumps(rows, indent=2))
    (out_dir / "classification_table.md").write_text(table + "\n")
    return {"rows": rows, "markdown": table, "runs": runs}
