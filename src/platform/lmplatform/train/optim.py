"""AdamW with decoupled weight decay (none on biases and norms) and a linear schedule."""
from __future__ import annotations

import math

import torch
from torch import nn
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from lmplatform.config.schema import OptimConfig


def build_optimizer(params: list[nn.Parameter], names: dict[int, str], cfg: OptimConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for param in params:
        name = names.get(id(param), "")
        (no_decay if param.ndim < 2 or "norm" in name.lower() or name.endswith("bias") else decay).append(param)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, eps=cfg.adam_eps)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else math.ceil(cfg.warmup_ratio * total_steps)
    if cfg.scheduler == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup)
    return get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def total_optimizer_steps(cfg: OptimConfig, train_examples: int, num_workers: int) -> int:
    if cfg.max_steps is not None:
        return cfg.max_steps
    per_step = cfg.batch_size * cfg.grad_accum_steps * num_workers
    return max(1, math.ceil(train_examples * float(cfg.epochs or 1.0) / per_step))
