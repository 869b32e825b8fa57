"""Mixed precision for the training loop (`optim.precision`): the autocast of forward passes and fp16's loss scale.

Autocast runs each operation in the type that suits it (matrix products in bf16/fp16, reductions and
the loss in fp32) while parameters, gradients and optimizer state stay fp32, so the optimizer update
is the fp32 one. bf16 has fp32's exponent range and needs nothing more. fp16 does not: small gradients
underflow to zero, so its loss is multiplied by a dynamic scale (`torch.amp.GradScaler`) before backward
and the gradients are unscaled before clipping and the step; a step whose gradients overflowed is
skipped and the scale lowered. `auto` is resolved on the worker's device (models/precision.py).
"""
from __future__ import annotations

from typing import ContextManager

import torch

from lmplatform.models.precision import autocast, resolve_precision


class MixedPrecision:
    """`optim.precision` on one worker's device. For fp32 and bf16 the scaler is disabled, and a disabled
    `GradScaler` passes losses, gradients and steps through unchanged, so the loop has one code path."""

    def __init__(self, precision: str, device: torch.device):
        precision = resolve_precision(precision, device)
        autocast(precision, device, "optim.precision")  # refuses fp16 off CUDA before any step
        self.precision = precision
        self.device = device
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def autocast(self) -> ContextManager[None]:
        """The forward passes' context: autocast to bf16/fp16, or nothing for fp32."""
        return autocast(self.precision, self.device, "optim.precision")

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call backward on: times the fp16 loss scale (unchanged otherwise)."""
        return self.scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale in place: before clipping, which must see the true norm."""
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step, and whether it was taken.

        fp16 skips the step when a gradient is inf or nan (the scale was too large) and halves the
        scale; a lower scale after `update` is how a skip shows (as Accelerate and Hugging Face's
        Trainer detect it). Every worker sees the same all-reduced gradients, so all skip together.
        """
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        return self.scaler.get_scale() >= before
