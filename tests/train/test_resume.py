"""Exact resume, after torchtune's test_training_state_on_resume: a run stopped after a checkpoint
and resumed in a freshly built worker continues the uninterrupted run's trajectory, loss for loss.

The loop runs in this process (`FolderReporter` instead of Ray Train) with a tiny BERT, real
objectives and collators, and the step losses logged to a real MLflow store. The batches come
from `resume_batches` over a fixed epoch order, as Ray Data's preserved order gives the workers
(tests/train/test_ingest.py checks that order on real Ray Data).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pytest
import torch

from lmplatform.objectives.run_config import RunConfig, load_run_config
from lmplatform.objectives.trainer import build_trainer
from lmplatform.tracking.mlflow_tracking import TrackedRun
from lmplatform.train.ingest import resume_batches
from lmplatform.train.loop import FolderReporter, Trainer
from lmplatform.train.recipe import Batch
from tests.conftest import TOKEN_WORDS, new_mlflow_store

TOTAL_STEPS = 10
BATCH_SIZE = 4
ROWS = 18  # 5 batches an epoch, the last one short: the run crosses an epoch boundary after the resume
STOP_AT = 4  # the first attempt dies right after its step-4 checkpoint, inside epoch 0


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(TOKEN_WORDS) for _ in range(rng.randint(low, high)))


def _text_rows(n: int, seed: int, low: int = 6, high: int = 20) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"text": _words(rng, low, high)} for _ in range(n)]


def _pair_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        query = _words(rng, 3, 5)
        rows.append({"query": query, "document": query + " " + _words(rng, 1, 3), "hard_negatives": [_words(rng, 3, 6)]})
    return rows


# objective -> (config overrides, rows of one split)
CASES: dict[str, tuple[list[str], Callable[[int, int], list[dict[str, Any]]]]] = {
    "mlm": (["objective.name=mlm", "objective.pseudo_perplexity_sentences=2"], _text_rows),
    "biencoder": (["objective.name=biencoder", "data.query_field=query", "data.document_field=document",
                   "data.hard_negative_field=hard_negatives", "objective.learnable_temperature=true",
                   "objective.temperature=0.1", "objective.symmetric=true"], _pair_rows),
    # documents of 20-30 words: every one can be sampled (2 anchors x max_span 4 = 16 tokens)
    "declutr": (["objective.name=declutr", "objective.min_span=2", "objective.max_span=4", "objective.temperature=0.1"],
                lambda n, seed: _text_rows(n, seed, 20, 30)),
}


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> str:
    """One MLflow store for the module; each run has its own id."""
    return new_mlflow_store(mlflow_template, tmp_path_factory.mktemp("mlruns"))


def _config(tiny_bert: Path, mlflow_uri: str, overrides: list[str]) -> RunConfig:
    return load_run_config(None, [
        f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", "data.train_paths=[unused.jsonl]",
        f"optim.batch_size={BATCH_SIZE}", "optim.lr=1e-3", "optim.warmup_steps=2", "optim.seed=7",
        "checkpoint.every_n_steps=4", "tracking.log_every_n_steps=1", "tracking.eval_every_n_steps=3",
        f"tracking.tracking_uri={mlflow_uri}", "scaling.cpus_per_worker=1", *overrides,
    ])


def _numpy_batch(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Rows as Ray Data's numpy batch format gives them (a list column is an object array of lists)."""
    out = {}
    for key in rows[0]:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row[key] for row in rows]
        out[key] = column
    return out


def _epoch(rows: list[dict[str, Any]], epoch: int) -> Iterator[dict[str, np.ndarray]]:
    order = np.random.default_rng([11, epoch]).permutation(len(rows))
    for start in range(0, len(rows), BATCH_SIZE):
        yield _numpy_batch([rows[i] for i in order[start:start + BATCH_SIZE]])


class Killed(Exception):
    """The worker died."""


class DiesAfterCheckpoint(FolderReporter):
    """Persists checkpoints like Ray Train, then kills the attempt after the one at `step`."""

    def __init__(self, root: Path, step: int):
        super().__init__(root)
        self.step = step

    def report(self, metrics: dict[str, float], checkpoint_dir: Optional[Path] = None,
               checkpoint_name: Optional[str] = None) -> None:
        super().report(metrics, checkpoint_dir, checkpoint_name)
        if checkpoint_dir is not None and metrics["step"] == self.step:
            raise Killed(f"killed after the checkpoint at step {self.step}")


def _attempt(cfg: RunConfig, run: TrackedRun, reporter: FolderReporter, checkpoint: Optional[Path],
             train_rows: list[dict[str, Any]], validation_rows: list[dict[str, Any]]) -> Trainer:
    """One worker process's life: build as a worker does, restore or seed, train."""
    trainer = build_trainer(cfg, TOTAL_STEPS, torch.device("cpu"), 0, run, reporter=reporter)
    trainer.begin(checkpoint)
    collate = trainer.recipe.collate

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        return resume_batches(_epoch(train_rows, epoch), collate, skip)

    def validation_batches() -> Iterator[Batch]:
        return (collate(_numpy_batch(validation_rows[i:i + BATCH_SIZE])) for i in range(0, len(validation_rows), BATCH_SIZE))

    trainer.fit(train_batches, validation_batches)
    return trainer


def _losses(run: TrackedRun) -> dict[int, float]:
    history = run.client.get_metric_history(run.run_id, "loss")
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {sorted(steps)}"
    return {m.step: m.value for m in history}


@pytest.mark.parametrize("objective", sorted(CASES))
def test_killed_run_resumes_on_the_same_trajectory(objective: str, tiny_bert: Path, store_uri: str, tmp_path: Path) -> None:
    overrides, make_rows = CASES[objective]
    cfg = _config(tiny_bert, store_uri, overrides)
    train_rows, validation_rows = make_rows(ROWS, 0), make_rows(6, 1)

    straight = TrackedRun.start(store_uri, "tests", f"{objective}-uninterrupted")
    reference = _attempt(cfg, straight, FolderReporter(tmp_path / "straight"), None, train_rows, validation_rows)

    interrupted = TrackedRun.start(store_uri, "tests", f"{objective}-interrupted")
    dying = DiesAfterCheckpoint(tmp_path / "interrupted", STOP_AT)
    with pytest.raises(Killed):
        _attempt(cfg, interrupted, dying, None, train_rows, validation_rows)
    (checkpoint,) = dying.checkpoints
    # Whatever the dead process left in this one's generators must not matter: a new worker starts afresh.
    torch.manual_seed(999)
    np.random.seed(999)
    random.seed(999)
    resumed = _attempt(cfg, interrupted, FolderReporter(tmp_path / "interrupted"), checkpoint, train_rows, validation_rows)

    expected, got = _losses(straight), _losses(interrupted)
    assert sorted(expected) == sorted(got) == list(range(1, TOTAL_STEPS + 1))
    after = range(STOP_AT + 1, TOTAL_STEPS + 1)
    gap = max(abs(expected[step] - got[step]) for step in after)
    print(f"{objective}: max |loss difference| over steps {after.start}-{after.stop - 1} after the resume: {gap:.3g}")
    assert gap <= 1e-5, {step: (expected[step], got[step]) for step in after}
    # the resumed attempt started at the checkpoint and crossed into epoch 1 like the uninterrupted run
    assert resumed.progress.step == reference.progress.step == TOTAL_STEPS
    assert resumed.progress.epoch == reference.progress.epoch == 1
    assert resumed.progress.tokens == reference.progress.tokens
    for (name, a), b in zip(reference.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    # and the same validation numbers at the end (eval runs at steps 3, 6, 9 in both)
    assert reference.latest_validation == pytest.approx(resumed.latest_validation, abs=1e-5)
