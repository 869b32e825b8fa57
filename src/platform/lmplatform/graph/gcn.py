"""Graph convolution (Kipf & Welling, 2017) and the adjacency matrices CLGS and CLDR use."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn


def normalized_adjacency(adjacency: torch.Tensor) -> torch.Tensor:
    """Â = D^-1/2 (A + I) D^-1/2, with D the degree matrix of A + I."""
    with_loops = adjacency + torch.eye(adjacency.shape[-1], dtype=adjacency.dtype, device=adjacency.device)
    inv_sqrt = with_loops.sum(-1).pow(-0.5)
    return inv_sqrt.unsqueeze(-1) * with_loops * inv_sqrt.unsqueeze(-2)


def edge_adjacency(num_nodes: int, edges: Sequence[tuple[int, int]], device: torch.device | None = None) -> torch.Tensor:
    """Symmetric 0/1 adjacency of an undirected graph (relations are read in both directions)."""
    adjacency = torch.zeros(num_nodes, num_nodes, device=device)
    for a, b in edges:
        adjacency[a, b] = adjacency[b, a] = 1.0
    return adjacency


def pair_adjacency(self_weight: float, device: torch.device | None = None) -> torch.Tensor:
    """CLDR's 2-node relation graph [[λ, 1-λ], [1-λ, λ]]: already row-normalised, used as Â directly."""
    return torch.tensor([[self_weight, 1.0 - self_weight], [1.0 - self_weight, self_weight]], device=device)


class GCNLayer(nn.Module):
    """X' = σ(Â X W); Â is passed in already normalised, batched or not ([..., n, n] @ [..., n, d])."""

    def __init__(self, in_dim: int, out_dim: int, activation: Callable[[torch.Tensor], torch.Tensor] = torch.relu,
                 bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim, bias=bias)
        self.activation = activation

    def forward(self, adjacency: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return self.activation(adjacency @ self.linear(features))
