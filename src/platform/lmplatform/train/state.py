"""Checkpoint contents: model, optimizer, scheduler, step counters and RNG state.

Rank 0 writes the shared state; every rank writes its own RNG state (Ray Train
merges the workers' checkpoint folders into one).
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

TRAINING_STATE = "training_state.pt"
PROGRESS = "progress.json"
FINAL_MODEL_DIR = "model"


@dataclass
class Progress:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches of the current epoch already consumed
    tokens: int = 0
    samples: int = 0
    initial_metrics: dict[str, float] = field(default_factory=dict)  # validation before any step


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(
    folder: Path,
    rank: int,
    progress: Progress,
    model: nn.Module,
    objective: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), folder / f"rng_rank{rank}.pt")
    if rank != 0:
        return
    torch.save(
        {
            "model": model.state_dict(),
            "objective": objective.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        folder / TRAINING_STATE,
    )
    (folder / PROGRESS).write_text(json.dumps(asdict(progress)))


def load_checkpoint(
    folder: Path, rank: int, model: nn.Module, objective: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> Progress:
    state = torch.load(folder / TRAINING_STATE, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    objective.load_state_dict(state["objective"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    rng_file = folder / f"rng_rank{rank}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return Progress(**json.loads((folder / PROGRESS).read_text()))
