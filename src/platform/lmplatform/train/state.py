"""Checkpoint contents: model, optimizer, scheduler, fp16 loss scale, step counters and every random state a step draws from.

Rank 0 writes the shared state; every rank writes its own random state (Ray Train
merges the workers' checkpoint folders into one). A resumed run continues the
uninterrupted run's trajectory only if nothing a later step depends on is left
out: the torch CPU generator (dropout on CPU, the MLM masker's draws), the CUDA
generator of the worker's device (dropout on a GPU), numpy's and Python's global
generators, and the recipe's own stateful parts (DeCLUTR's span sampler). Under fp16 the
GradScaler's state (scale, steps since the last overflow) is kept too: a fresh scale would start
high again and skip steps the uninterrupted run took.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

TRAINING_STATE = "training_state.pt"
PROGRESS = "progress.json"
FINAL_MODEL_DIR = "model"
BEST_WEIGHTS = "best_model"  # key in the training state


@dataclass
class Progress:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches of the current epoch already consumed
    tokens: int = 0
    samples: int = 0
    initial_metrics: dict[str, float] = field(default_factory=dict)  # validation before any step
    # early stopping (optim.early_stopping): the best value of its metric so far, where, and since when not beaten
    best_metric: Optional[float] = None
    best_step: int = 0
    validations_since_best: int = 0


@runtime_checkable
class Stateful(Protocol):
    """Anything a step draws from that keeps its own state (e.g. a collator's numpy Generator)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and every CUDA device), numpy's and Python's global generators."""
    torch.manual_seed(seed)  # also seeds every CUDA device
    np.random.seed(seed % 2**32)
    random.seed(seed)


def rng_state(device: Optional[torch.device] = None) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: Mapping[str, Any], device: Optional[torch.device] = None) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    # A checkpoint written on CPU has no CUDA state: that resume cannot be exact on a GPU, and
    # a GPU checkpoint resumed on CPU has no generator to restore it into.
    if "cuda" in state and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rng_rank{rank}.pt"


def save_checkpoint(
    folder: Path,
    rank: int,
    progress: Progress,
    model: nn.Module,
    objective: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    parts: Optional[Mapping[str, Stateful]] = None,
    device: Optional[torch.device] = None,
    scaler: Optional[torch.amp.GradScaler] = None,
    best_weights: Optional[Mapping[str, torch.Tensor]] = None,
) -> None:
    """`parts`: this rank's stateful recipe parts by name, saved with its random state.
    `scaler`: the fp16 loss scaler (saved when enabled). `best_weights`: the model's weights at the best
    validation so far (early stopping with keep: best)."""
    folder.mkdir(parents=True, exist_ok=True)
    per_rank = {"rng": rng_state(device), "parts": {name: part.state_dict() for name, part in (parts or {}).items()}}
    torch.save(per_rank, _rank_file(folder, rank))
    if rank != 0:
        return
    state = {
        "model": model.state_dict(),
        "objective": objective.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }
    if scaler is not None and scaler.is_enabled():
        state["grad_scaler"] = scaler.state_dict()
    if best_weights is not None:
        state[BEST_WEIGHTS] = dict(best_weights)
    torch.save(state, folder / TRAINING_STATE)
    (folder / PROGRESS).write_text(json.dumps(asdict(progress)))


def load_checkpoint(
    folder: Path,
    rank: int,
    model: nn.Module,
    objective: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    parts: Optional[Mapping[str, Stateful]] = None,
    device: Optional[torch.device] = None,
    scaler: Optional[torch.amp.GradScaler] = None,
) -> tuple[Progress, Optional[dict[str, torch.Tensor]]]:
    """Restore what `save_checkpoint` wrote; (progress, the best validation's weights or None). A checkpoint
    without a loss scale (written at fp32 or bf16) leaves an fp16 `scaler` at its initial scale."""
    state = torch.load(folder / TRAINING_STATE, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    objective.load_state_dict(state["objective"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and scaler.is_enabled() and "grad_scaler" in state:
        scaler.load_state_dict(state["grad_scaler"])
    rank_file = _rank_file(folder, rank)
    if rank_file.is_file():  # absent when resuming with more workers than the checkpoint had
        saved = torch.load(rank_file, weights_only=False)
        if "rng" not in saved:  # written before the per-rank file held more than the global generators
            saved = {"rng": saved, "parts": {}}
        set_rng_state(saved["rng"], device)
        for name, part in (parts or {}).items():
            if name in saved["parts"]:
                part.load_state_dict(saved["parts"][name])
    return Progress(**json.loads((folder / PROGRESS).read_text())), state.get(BEST_WEIGHTS)
