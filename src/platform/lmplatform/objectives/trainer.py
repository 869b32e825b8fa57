"""A `Trainer` for a run config, built in this process: the objective's seeded recipe, the EWC penalty, the loop.

The Ray Train worker (`jobs/train_worker.py`) builds its trainer here, and so do runs driven in one process
without Ray: evaluation's fine-tuning, the tests of exact resume and the in-process benches.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch
from torch import nn

from lmplatform.objectives.ewc_setup import attach_ewc
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.loop import Reporter, Trainer
from lmplatform.train.recipe import TrainingRecipe
from lmplatform.train.state import seed_everything

CorpusValidator = Callable[[nn.Module], dict[str, float]]


def build_trainer(
    cfg: RunConfig,
    total_steps: int,
    device: torch.device,
    rank: int,
    tracker: Any = None,
    tracking_uri: Optional[str] = None,
    *,
    reporter: Reporter,
    corpus_validator: Optional[Callable[[TrainingRecipe], Optional[CorpusValidator]]] = None,
) -> Trainer:
    """What a worker process builds before training: seeded recipe, EWC penalty, trainer.

    `corpus_validator(recipe)` gives the run's corpus-level retrieval validator, if any (the Ray Train worker's
    ranks its Ray-held retrieval set). Start the trainer with `trainer.begin(checkpoint folder or None)`. The
    tests of exact resume build a resumed trainer here too, as a restarted worker would.
    """
    seed_everything(cfg.optim.seed)  # identical initialisation of new heads on every rank
    recipe = objective_spec(cfg.objective.name).build_recipe(cfg)
    ewc_report = attach_ewc(cfg, recipe, tracking_uri)  # before any restore: θ* is the start model
    if ewc_report is not None and rank == 0:
        print(f"[lmp] {ewc_report.summary()}", file=sys.__stdout__, flush=True)  # once: see Trainer._print
        if tracker is not None:
            tracker.log_metrics(ewc_report.metrics(), step=0)
    return Trainer(cfg, recipe, total_steps, device, rank, tracker,
                   corpus_validator=corpus_validator(recipe) if corpus_validator is not None else None, reporter=reporter)
