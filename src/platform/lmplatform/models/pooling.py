"""Token vectors to one vector per text."""
from __future__ import annotations

from typing import Literal

import torch

Pooling = Literal["mean", "cls", "max"]


def pool(token_embeddings: torch.Tensor, attention_mask: torch.Tensor, mode: Pooling) -> torch.Tensor:
    """Pool [batch, seq, dim] under a [batch, seq] mask; padding never contributes."""
    if mode == "cls":
        return token_embeddings[:, 0]
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    if mode == "mean":
        return (token_embeddings * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    if mode == "max":
        filled = token_embeddings.masked_fill(mask == 0, torch.finfo(token_embeddings.dtype).min)
        return filled.max(1).values
    raise ValueError(f"unknown pooling {mode!r}; allowed: mean, cls, max")
