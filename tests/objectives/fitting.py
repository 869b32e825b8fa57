"""A few optimizer steps of an objective on one batch (shared by the objective tests)."""
from __future__ import annotations

import torch


def fit_one_batch(objective: torch.nn.Module, model: torch.nn.Module, batch: dict, steps: int = 15,
                  lr: float = 3e-3) -> dict[str, float]:
    """Train model and objective parameters on `batch`; return the last step's metrics."""
    params = list(model.parameters()) + list(objective.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr)
    metrics: dict[str, float] = {}
    for _ in range(steps):
        loss, metrics = objective(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return metrics
