"""The sts evaluation task: every dataset x encoder, cosine of each pair against gold.

Spearman and Pearson of the raw cosines, EDRM of the cosines mapped linearly onto
the gold scale and, when a labelled `fit_path` is given, EDRM of an isotonic map
fitted on it (see `lmplatform.metrics.sts`). One scatter PNG per dataset.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.data.sts_pairs import STSPairs, read_pairs_jsonl
from lmplatform.evaluation.plots import plot_sts_scatter
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from lmplatform.evaluation.tasks.sts.config import StsDataset, StsTask
from lmplatform.markdown import markdown_table
from lmplatform.metrics.sts import CosineToScale, sts_metrics

logger = logging.getLogger(__name__)


def read_sts_dataset(ds: StsDataset) -> tuple[STSPairs, Optional[STSPairs]]:
    """The pairs scored and, with `fit_path`, the pairs the isotonic map is fitted on (on the same scale)."""
    fields = dict(score_field=ds.score_field, sentence1_field=ds.sentence1_field, sentence2_field=ds.sentence2_field)
    pairs = read_pairs_jsonl(ds.path, ds.name, ds.scale, where=ds.where, limit=ds.limit, **fields)
    fit = None
    if ds.fit_path:
        fit = read_pairs_jsonl(ds.fit_path, f"{ds.name}-fit", pairs.scale, where=ds.fit_where, limit=ds.limit, **fields)
    return pairs, fit


def cosine_scores(encoder: Any, sentence1: Sequence[str], sentence2: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """Cosine similarity of each pair under `encoder` (an `Encoder`); each distinct sentence is encoded once."""
    unique = list(dict.fromkeys([*sentence1, *sentence2]))
    position = {text: i for i, text in enumerate(unique)}
    vectors = encoder.encode(unique, batch_size=batch_size, normalize=True)
    a = vectors[[position[t] for t in sentence1]]
    b = vectors[[position[t] for t in sentence2]]
    return np.sum(a * b, axis=1).astype(np.float64)


def score_sts(encoder: Any, pairs: STSPairs, fit: Optional[STSPairs] = None, batch_size: int = 32,
              cosine_range: tuple[float, float] = (0.0, 1.0)) -> tuple[dict[str, float], np.ndarray]:
    """Metrics of one encoder on one pair set (`sts_metrics`; with `fit`, also `edrm_isotonic`), and the
    cosines (for plots)."""
    cosines = cosine_scores(encoder, pairs.sentence1, pairs.sentence2, batch_size)
    metrics = sts_metrics(cosines, pairs.scores, pairs.scale, CosineToScale(pairs.scale, "linear", cosine_range))
    if fit is not None:
        mapping = CosineToScale(pairs.scale, "isotonic").fit(cosine_scores(encoder, fit.sentence1, fit.sentence2, batch_size),
                                                             fit.scores)
        metrics["edrm_isotonic"] = sts_metrics(cosines, pairs.scores, pairs.scale, mapping)["edrm"]
    return metrics, cosines


def run(task: StsTask, output_dir: Path, models: Optional[ModelCache] = None) -> TaskResult:
    models = models or ModelCache()
    data = [(ds, *read_sts_dataset(ds)) for ds in task.datasets]  # every file is read before any model is loaded
    results: list[dict[str, Any]] = []
    cosines: dict[tuple[str, str], np.ndarray] = {}
    for ds, pairs, fit in data:
        for spec in task.encoders:
            start = time.perf_counter()
            metrics, cos = score_sts(models.encoder(spec), pairs, fit, spec.batch_size, task.cosine_range)
            cosines[(ds.name, spec.name)] = cos
            row = {"dataset": ds.name, "encoder": spec.name, "model": spec.model, "scale": list(pairs.scale),
                   "pairs": len(pairs), "fit_pairs": len(fit) if fit else 0,
                   "bad_rows": len(pairs.bad_rows) + (len(fit.bad_rows) if fit else 0),
                   "bad_row_examples": (pairs.bad_rows + (fit.bad_rows if fit else []))[:5],
                   "seconds": round(time.perf_counter() - start, 2), "metrics": metrics}
            logger.info("sts %s / %s: %s", ds.name, spec.name, {k: round(v, 4) for k, v in metrics.items()})
            results.append(row)
    flat = {f"{r['dataset']}.{r['encoder']}.{name}": value for r in results for name, value in r["metrics"].items()}
    artifacts = [plot_sts_scatter(ds.name, pairs, task.encoders, cosines, output_dir) for ds, pairs, _ in data]
    return TaskResult("sts", flat, sts_section(results), {"results": results}, artifacts)


def sts_section(results: list[dict[str, Any]]) -> str:
    """The report's STS section: a line per dataset x encoder, and how to read it."""
    header = ["dataset", "encoder", "pairs", "scale", "Spearman", "Pearson", "EDRM (linear)", "EDRM (isotonic)"]
    rows = []
    for r in results:
        m = r["metrics"]
        iso = f"{m['edrm_isotonic']:.4f}" if "edrm_isotonic" in m else "n/a"
        scale = f"{r['scale'][0]:g}–{r['scale'][1]:g}"
        rows.append([r["dataset"], r["encoder"], str(r["pairs"]), scale, f"{m['spearman']:.4f}", f"{m['pearson']:.4f}",
                     f"{m['edrm']:.4f}", iso])
    bad = sum(r["bad_rows"] for r in results)
    lines = ["## STS", "", markdown_table(header, rows)]
    lines += ["", "Spearman/Pearson of cosine against gold; EDRM = mean(1 − |pred − gold| / dmax(gold)) after mapping cosine "
              "onto the gold scale (linear: a fixed cosine range, isotonic: fitted on the dataset's fit_path). "
              f"Rows skipped as unusable: {bad}."]
    return "\n".join(lines) + "\n"
