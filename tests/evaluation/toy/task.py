"""The toy evaluation: mean |‖v‖ − target| over the pooled (not normalised) vectors of the texts."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig, StageEvaluationResult
from lmplatform.evaluation.tasks.common import ModelCache, TaskResult
from tests.evaluation.toy.config import ToyNormTask


def norm_error(encoder: Any, texts: Sequence[str], target: float) -> float:
    vectors = encoder.encode(list(texts), batch_size=8, normalize=False)
    return float(np.abs(np.linalg.norm(vectors, axis=1) - target).mean())


def run(task: ToyNormTask, output_dir: Path, models: Optional[ModelCache] = None) -> TaskResult:
    models = models or ModelCache()
    rows = []
    for ds in task.datasets:
        texts = [json.loads(line)["text"] for line in Path(ds.path).read_text().splitlines() if line.strip()]
        for spec in task.encoders:
            rows.append({"dataset": ds.name, "encoder": spec.name,
                         "norm_error": norm_error(models.encoder(spec), texts, task.target_norm)})
    metrics = {f"{r['dataset']}.{r['encoder']}.norm_error": r["norm_error"] for r in rows}
    markdown = "## Toy norm\n\n" + "\n".join(f"- {r['dataset']} / {r['encoder']}: {r['norm_error']:.4f}" for r in rows) + "\n"
    return TaskResult("toy_norm", metrics, markdown, {"results": rows})


def evaluate_model(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
    from lmplatform.data.sampling import sample_texts
    from lmplatform.models.encoder import Encoder

    texts = sample_texts(cfg.data, cfg.max_texts, seed=cfg.mask_seed, split=cfg.split)
    error = norm_error(Encoder.from_pretrained(model_dir, max_seq_length=cfg.max_seq_length), texts, 1.0)
    return StageEvaluationResult({"norm_error": error, "texts": float(len(texts))}, score=-error)
