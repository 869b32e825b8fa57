"""InfoNCE over in-batch negatives, with a learnable temperature and a global-batch gather.

Under several workers each one scores its own queries against the keys of the
*global* batch: embeddings are gathered with `torch.distributed.nn.functional.all_gather`,
whose backward sends every rank's gradient back to the rank that produced the
embedding. Each rank's loss is the mean over its own queries, and the loop averages
gradients over workers, so W workers with batch B/W give the loss and gradients of
one worker with batch B (checked in tests/objectives/test_infonce.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lmplatform.train.distributed import is_distributed


class Temperature(nn.Module):
    """τ = exp(log τ), kept in [min_value, max_value]; learnable or fixed.

    Learning log τ keeps τ positive and makes its steps relative; the bounds stop a
    collapse to τ→0 (logits blow up) or a drift to a uselessly flat softmax.

    A learnable log τ gets its own learning rate (`objective.temperature_lr`, passed on by
    `temperature_learning_rates`). The bounds hold as CLIP holds its logit scale: the training
    loop projects log τ back into range after each step (`project_`). Forward also clamps the value,
    but lets the gradient through, so τ at a bound can still move back in (a plain clamp has zero
    gradient outside, and rounding at the bound would freeze τ there).
    """

    def __init__(self, initial: float = 0.05, learnable: bool = True, min_value: float = 0.01, max_value: float = 1.0):
        super().__init__()
        if not min_value <= initial <= max_value:
            raise ValueError(f"temperature {initial} is outside [{min_value}, {max_value}]")
        self.min_value = min_value
        self.max_value = max_value
        log_tau = torch.tensor(math.log(initial), dtype=torch.float32)
        if learnable:
            self.log_tau = nn.Parameter(log_tau)
        else:
            self.register_buffer("log_tau", log_tau)

    @property
    def learnable(self) -> bool:
        return isinstance(self.log_tau, nn.Parameter)

    def forward(self) -> torch.Tensor:
        tau = self.log_tau.exp()
        return tau + (tau.clamp(self.min_value, self.max_value) - tau).detach()

    @torch.no_grad()
    def project_(self) -> None:
        """Put log τ back into [log min_value, log max_value] (after an optimizer step)."""
        self.log_tau.clamp_(math.log(self.min_value), math.log(self.max_value))


def temperature_from_config(objective: Any) -> Temperature:
    """The `Temperature` an objective config describes (`temperature`, `learnable_temperature`, `min_/max_temperature`)."""
    return Temperature(objective.temperature, objective.learnable_temperature,
                       objective.min_temperature, objective.max_temperature)


def temperature_learning_rates(objective: nn.Module, temperature: Temperature, lr: float) -> dict[str, float]:
    """{name of log τ in `objective`: lr} when τ is learnable, for `TrainingRecipe.learning_rates`."""
    if not temperature.learnable:
        return {}
    return {name: lr for name, param in objective.named_parameters() if param is temperature.log_tau}


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(rows of every worker concatenated in rank order, offset of this worker's rows).

    Identity outside a multi-worker group. Workers may hold different numbers of
    rows (the last batch of an epoch): rows are padded to the largest count for the
    collective and the padding is cut off again.
    """
    if not is_distributed():
        return tensor, 0
    from torch.distributed.nn.functional import all_gather

    world, rank = dist.get_world_size(), dist.get_rank()
    count = torch.tensor([tensor.shape[0]], dtype=torch.long, device=tensor.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    # A host read (a sync), needed: the sizes shape the padding and the cut. Distributed runs only.
    sizes = [int(c.item()) for c in counts]
    largest = max(sizes)
    if largest == 0:  # every worker is empty (e.g. no hard negatives anywhere in this step)
        return tensor, 0
    padded = F.pad(tensor, (0, 0, 0, largest - tensor.shape[0])) if tensor.shape[0] < largest else tensor
    pieces = all_gather(padded)
    gathered = torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])
    return gathered, sum(sizes[:rank])


def inbatch_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Share of rows whose label column scores strictly above every other column; logits [b, n], labels [b].

    A tie counts as a miss, so a collapsed encoder (all logits equal) scores 0, not 1/n or 1.
    A detached 0-dim tensor on the logits' device: the training loop reads it at logging time only.
    """
    logits = logits.detach()
    if not len(labels):  # a shape, known on the host
        return logits.new_zeros((), dtype=torch.float32)
    own = logits.gather(1, labels[:, None])
    return ((logits >= own).sum(1) == 1).float().mean()


@dataclass
class InfoNCEOutput:
    loss: torch.Tensor
    query_to_key_loss: torch.Tensor
    key_to_query_loss: Optional[torch.Tensor]
    accuracy: torch.Tensor  # 0-dim: share of local queries whose own key alone scores highest (ties count against it)

    def metrics(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """Detached 0-dim tensors, left on the device: reading them here would sync every micro-step."""
        out = {f"{prefix}loss": self.loss.detach(), "inbatch_accuracy": self.accuracy.detach()}
        if self.key_to_query_loss is not None:
            out[f"{prefix}q2k_loss"] = self.query_to_key_loss.detach()
            out[f"{prefix}k2q_loss"] = self.key_to_query_loss.detach()
        return out


def info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: torch.Tensor | float,
    symmetric: bool = False,
    hard_negatives: Optional[torch.Tensor] = None,
    normalize: bool = True,
    gather: bool = True,
) -> InfoNCEOutput:
    """Cross-entropy of each query against its own key among every key of the global batch.

    queries, keys: [b, d], row i of keys is the positive of row i of queries.
    hard_negatives: [n, d] extra keys that are negatives for every query (gathered too).
    symmetric: also score each key against all queries and average the two losses;
    hard negatives take part in the query→key direction only.
    gather=False keeps to this worker's rows (evaluation, where workers may hold
    different numbers of batches and must not enter a collective).
    """
    collect = gather_with_grad if gather else (lambda tensor: (tensor, 0))
    if queries.shape != keys.shape:
        raise ValueError(f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)} must have the same shape")
    if normalize:
        queries, keys = F.normalize(queries.float(), dim=-1), F.normalize(keys.float(), dim=-1)
        if hard_negatives is not None:
            hard_negatives = F.normalize(hard_negatives.float(), dim=-1)
    all_keys, offset = collect(keys)
    candidates = all_keys
    if hard_negatives is not None:
        all_negatives, _ = collect(hard_negatives)
        candidates = torch.cat([all_keys, all_negatives])
    labels = torch.arange(queries.shape[0], device=queries.device) + offset
    logits = queries @ candidates.T / temperature
    forward_loss = F.cross_entropy(logits, labels)
    accuracy = inbatch_accuracy(logits.detach(), labels)
    if not symmetric:
        return InfoNCEOutput(forward_loss, forward_loss, None, accuracy)
    all_queries, _ = collect(queries)
    backward_loss = F.cross_entropy(keys @ all_queries.T / temperature, labels)
    return InfoNCEOutput((forward_loss + backward_loss) / 2, forward_loss, backward_loss, accuracy)
