"""The training loop driven in this process (`Trainer` with a `FolderReporter`, no Ray), for machines without Ray.

Where a GPU machine cannot take the Ray wheel, the GPU benches read each config's rows as its
`prepare_data` would hand them to Ray Data, and feed the worker's own `Trainer` directly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
from gpu_train import epoch_batches


def split_rows(cfg: Any) -> dict[str, list[dict[str, Any]]]:
    """{'train', 'validation'} rows, as the objective's Ray datasets would yield them."""
    name = cfg.objective.name
    if name in ("mlm", "declutr"):
        from lmplatform.data.corpus import local_documents, scan_corpus

        corpus = scan_corpus(cfg.data, use_ray=False)
        rows = {split: [{"text": text} for text in local_documents(corpus, split)] for split in ("train", "validation")}
        if name == "declutr":
            from lmplatform.models.resolve import resolve_model_path
            from lmplatform.objectives.declutr.objective import keep_sampleable
            from lmplatform.objectives.declutr.spans import count_sampleable

            needed = count_sampleable([], cfg.objective.num_anchors, cfg.objective.max_span).min_tokens
            path = str(resolve_model_path(cfg.model.name_or_path))
            for split, items in rows.items():
                if items:
                    kept = keep_sampleable({"text": np.array([r["text"] for r in items], dtype=object)}, path, needed)
                    rows[split] = [{"text": t} for t in kept["text"]]
        return rows
    if name in ("biencoder", "cross_encoder"):
        from lmplatform.data.pairs import read_pairs

        pairs = read_pairs(cfg.data)
        if name == "biencoder":
            return {split: pairs.rows(split) for split in ("train", "validation")}
        from lmplatform.objectives.cross_encoder.objective import choose_negatives, negative_groups

        rng, out = np.random.default_rng(cfg.objective.seed), {}
        for split, split_pairs in (("train", pairs.train), ("validation", pairs.validation)):
            negatives = choose_negatives(split_pairs, cfg.objective.negatives_per_positive, rng,
                                         cfg.objective.use_hard_negatives)
            out[split] = negative_groups(split_pairs, negatives)
        return out
    if name == "graph_cl":
        from lmplatform.objectives.graph_cl.objective import load_sentences

        train, validation, _ = load_sentences(cfg)
        return {"train": [{"sentence": s.to_json()} for s in train],
                "validation": [{"sentence": s.to_json()} for s in validation]}
    raise ValueError(f"no Ray-free reader for objective {name!r}")


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

    from lmplatform.objectives.trainer import build_trainer
    from lmplatform.train.ingest import resume_batches
    from lmplatform.train.loop import FolderReporter
    from lmplatform.train.optim import total_optimizer_steps
    from lmplatform.train.state import FINAL_MODEL_DIR

    rows = split_rows(cfg)
    batch_size = cfg.optim.batch_size
    steps = total_optimizer_steps(cfg.optim, len(rows["train"]), 1)
    reporter = FolderReporter(work)
    trainer = build_trainer(cfg, steps, torch.device(device), 0, reporter=reporter)
    if cfg.retrieval_validation is not None and trainer.recipe.retrieval_view is not None:
        from lmplatform.evaluation.retrieval_validation import CorpusRetrievalValidator, prepare_retrieval_set

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
