"""The training loop driven in this process (`Trainer` with a `FolderReporter`, no Ray), for machines without Ray.

Where a GPU machine cannot take the Ray wheel, the GPU benches read each config's rows as its
`prepare_data` would hand them to Ray Data (`ObjectiveSpec.rows`), and feed the worker's own `Trainer` directly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from gpu_train import epoch_batches


@dataclass
class InProcessRun:
    initial: dict[str, float]
    final: dict[str, float]
    model_dir: Path  # the exported model, as run_training's result.model_dir
    train_rows: int
    validation_rows: int
    steps: int
    seconds: float


def train_in_process(cfg: Any, device: str, work: Path) -> InProcessRun:
    """Train `cfg` on one device in this process, validating before and after, and export the model under `work`.

    optim.max_steps is honoured; otherwise the steps are those Ray Train would run for optim.epochs."""
    import torch

    from lmplatform.objectives import build_trainer, objective_spec
    from lmplatform.train import FINAL_MODEL_DIR, FolderReporter, resume_batches, total_optimizer_steps

    rows = objective_spec(cfg.objective.name).rows(cfg)
    batch_size = cfg.optim.batch_size
    steps = total_optimizer_steps(cfg.optim, len(rows["train"]), 1)
    reporter = FolderReporter(work)
    trainer = build_trainer(cfg, steps, torch.device(device), 0, reporter=reporter)
    if cfg.retrieval_validation is not None and trainer.recipe.retrieval_view is not None:
        from lmplatform.evaluation import CorpusRetrievalValidator, prepare_retrieval_set

        trainer.corpus_validator = CorpusRetrievalValidator(prepare_retrieval_set(cfg), cfg.retrieval_validation,
                                                            trainer.recipe.retrieval_view)
    trainer.begin(None)
    collate = trainer.recipe.collate

    def train_batches(epoch: int, skip: int) -> Iterator[Any]:
        return resume_batches(epoch_batches(rows["train"], batch_size, epoch), collate, skip)

    def validation_batches() -> Optional[Iterator[Any]]:
        if not rows.get("validation"):
            return None
        return (collate(b) for b in epoch_batches(rows["validation"], batch_size, 0))

    start = time.perf_counter()
    final = trainer.fit(train_batches, validation_batches)
    return InProcessRun(initial=trainer.progress.initial_metrics, final=final,
                        model_dir=reporter.checkpoints[-1] / FINAL_MODEL_DIR, train_rows=len(rows["train"]),
                        validation_rows=len(rows.get("validation") or []), steps=steps,
                        seconds=time.perf_counter() - start)
