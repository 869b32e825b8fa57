"""Collectives used by the loop.

Gradients are all-reduced explicitly after backward instead of wrapping the model
in DDP: objectives may call the model several times per step (anchors and
positives, graphs and sentences), which DDP's reducer does not allow without
static-graph tricks. One flattened all-reduce per optimizer step costs the same.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

T = TypeVar("T")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def broadcast_parameters(module: torch.nn.Module, src: int = 0) -> None:
    if not is_distributed():
        return
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src)


def all_reduce_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    if not is_distributed():
        return
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        grad.copy_(synced)


def reduce_weighted(metrics: dict[str, tuple[float, float]], device: torch.device) -> dict[str, float]:
    """Sum (value, weight) pairs over workers and return value/weight per metric."""
    keys = sorted(metrics)
    if not keys:
        return {}
    tensor = torch.tensor([[metrics[k][0], metrics[k][1]] for k in keys], dtype=torch.float64, device=device)
    if is_distributed():
        dist.all_reduce(tensor)
    return {k: float(tensor[i, 0] / tensor[i, 1]) for i, k in enumerate(keys) if float(tensor[i, 1]) > 0}


def mean_over_workers(values: dict[str, float], device: torch.device) -> dict[str, float]:
    return reduce_weighted({k: (v, 1.0) for k, v in values.items()}, device)


def sum_over_workers(value: float, device: torch.device) -> float:
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item())


def while_all_have_batches(batches: Iterable[T], device: torch.device) -> Iterator[T]:
    """Yield batches while every worker still has one, so no worker waits in a collective alone."""
    iterator = iter(batches)
    while True:
        batch = next(iterator, None)
        if is_distributed():
            flag = torch.tensor([0 if batch is None else 1], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            if int(flag.item()) == 0:
                return
        elif batch is None:
            return
        yield batch


def map_sharded(fn: Callable[[list[T]], np.ndarray], items: Sequence[T]) -> np.ndarray:
    """`fn(items)` computed in contiguous shards, one per worker, and gathered in order on every worker.

    fn maps a list of items to an array with one row per item (e.g. texts -> vectors).
    """
    if not is_distributed():
        return fn(list(items))
    world, rank = dist.get_world_size(), dist.get_rank()
    bounds = np.linspace(0, len(items), world + 1).astype(int)
    mine = fn(list(items[bounds[rank] : bounds[rank + 1]]))
    pieces: list[Optional[np.ndarray]] = [None] * world
    dist.all_gather_object(pieces, mine)
    return np.concatenate([p for p in pieces if p is not None])
