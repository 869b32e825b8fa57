"""AdamW with decoupled weight decay (none on biases and norms) and a linear schedule."""
from __future__ import annotations

import math
from typing import Mapping, Optional

import torch
from torch import nn
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from lmplatform.config.schema import OptimConfig


def _decays(param: nn.Parameter, name: str) -> bool:
    return not (param.ndim < 2 or "norm" in name.lower() or name.endswith("bias"))


def build_optimizer(
    params: list[nn.Parameter], names: dict[int, str], cfg: OptimConfig, learning_rates: Optional[Mapping[str, float]] = None
) -> torch.optim.Optimizer:
    """Two groups at `cfg.lr` (with and without weight decay), plus one group per parameter named in
    `learning_rates` at its own rate (CLIP gives its logit scale one). The schedule scales every
    group's rate by the same factor, so warm-up and decay apply to those too."""
    own = dict(learning_rates or {})
    unknown = sorted(set(own) - {names.get(id(p), "") for p in params})
    if unknown:
        raise ValueError(f"learning rates for parameters that are not trained: {', '.join(unknown)}")
    decay, no_decay, separate = [], [], []
    for param in params:
        name = names.get(id(param), "")
        if name in own:
            separate.append({"params": [param], "lr": own[name], "name": name,
                             "weight_decay": cfg.weight_decay if _decays(param, name) else 0.0})
        else:
            (decay if _decays(param, name) else no_decay).append(param)
    # The two shared groups come first, so checkpoints of runs without own rates keep their layout.
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kernels = kernel_options(params)
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]] + separate, lr=cfg.lr, eps=cfg.adam_eps, **kernels)
    optimizer.register_load_state_dict_post_hook(lambda opt: _keep_kernels(opt, kernels))
    return optimizer


def kernel_options(params: list[nn.Parameter]) -> dict[str, bool]:
    """The fastest AdamW implementation the parameters allow: the fused kernel (one launch for every
    parameter) where all are floating-point CUDA tensors, else the multi-tensor (foreach) one. Both
    compute the same update as the per-parameter loop, up to float rounding."""
    if params and all(p.is_cuda and p.is_floating_point() for p in params):
        return {"fused": True}
    return {"foreach": True}


def _keep_kernels(optimizer: torch.optim.Optimizer, kernels: dict[str, bool]) -> None:
    """After loading a state dict: this device's kernel, not the one of the checkpoint's device.

    `load_state_dict` takes every group's options from the checkpoint, `fused` and `foreach` included,
    and the fused kernel keeps its step counts on the parameters' device (the others on the CPU)."""
    fused = kernels.get("fused", False)
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = fused or None, kernels.get("foreach")
        for param in group["params"]:
            state = optimizer.state.get(param)
            if state and torch.is_tensor(state.get("step")):
                state["step"] = state["step"].to(dtype=torch.float32, device=param.device if fused else "cpu")


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
