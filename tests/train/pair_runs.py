"""Short bi-encoder runs of the real loop in this process (no Ray): a tiny BERT learns to match each query
with the document that repeats it. Shared by the precision and gradient-checkpointing tests."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from lmplatform.objectives.run_config import RunConfig, load_run_config
from lmplatform.objectives.trainer import build_trainer
from lmplatform.train.ingest import resume_batches
from lmplatform.train.loop import FolderReporter, Trainer
from lmplatform.train.recipe import Batch
from tests.conftest import TOKEN_WORDS

BATCH_SIZE = 4


def pair_config(tiny_bert: Path, overrides: list[str]) -> RunConfig:
    return load_run_config(None, [
        f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", "data.train_paths=[unused.jsonl]",
        "objective.name=biencoder", "objective.temperature=0.1", f"optim.batch_size={BATCH_SIZE}", "optim.lr=1e-3",
        "optim.warmup_steps=0", "optim.scheduler=constant", "optim.seed=7", "checkpoint.every_n_steps=1000",
        "scaling.cpus_per_worker=1", *overrides,
    ])


def _column(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def pair_batches(rows: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Ray Data numpy batches of (query, query plus 1-3 words) pairs."""
    rng = random.Random(seed)
    queries = [" ".join(rng.choice(TOKEN_WORDS) for _ in range(rng.randint(3, 5))) for _ in range(rows)]
    documents = [q + " " + " ".join(rng.choice(TOKEN_WORDS) for _ in range(rng.randint(1, 3))) for q in queries]
    return [{"query": _column(queries[i:i + BATCH_SIZE]), "document": _column(documents[i:i + BATCH_SIZE])}
            for i in range(0, rows, BATCH_SIZE)]


def pair_trainer(cfg: RunConfig, folder: Path) -> Trainer:
    """A started trainer of `cfg` for optim.max_steps, as a worker builds it (checkpoints go to `folder`)."""
    trainer = build_trainer(cfg, cfg.optim.max_steps, torch.device("cpu"), 0, reporter=FolderReporter(folder))
    trainer.begin(None)
    return trainer


def fit_pairs(trainer: Trainer) -> dict[str, float]:
    """Train on `pair_batches()`, validating on the same pairs; the run's summary."""
    batches = pair_batches()

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        return resume_batches(iter(batches), trainer.recipe.collate, skip)

    return trainer.fit(train_batches, lambda: (trainer.recipe.collate(b) for b in batches))
