"""What the generic training loop needs from an objective, and nothing more."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
from torch import nn

from lmplatform.train.state import Stateful

Batch = dict[str, torch.Tensor]
WeightedMetrics = dict[str, tuple[float, float]]


@dataclass
class TrainingRecipe:
    """The model to optimise, the objective that scores it, and how data becomes batches.

    - `objective(model, batch)` returns (loss, metrics), the metrics as detached 0-dim tensors (the loop
      reads them at logging time only; a float would read the device every micro-step). It runs under the run's autocast; the loop
      then calls backward once on the loss times a factor (1/grad_accum_steps, the fp16 loss scale),
      outside autocast. The loss's backward may do more than differentiate its graph: GradCache
      (objectives/gradcache.py) embeds its chunks again from a hook on the loss, scaling the cached
      gradients by the factor it receives, under the autocast its forward pass recorded.
    - `collate` turns a Ray Data numpy batch into tensors.
    - `export(model, folder)` writes the final model as a Hugging Face folder.
    - `evaluate(model, batches, rank)` returns {metric: (sum, weight)} so workers can be reduced;
      `summarize` derives further metrics (e.g. perplexity) from the reduced means.
    - `regularizers` each return (loss, metrics) from the model alone (e.g. an EWC penalty).
    - `retrieval_view(model)` is the model as an `Encoder` or a `CrossEncoder`, for corpus-level
      retrieval validation (`retrieval_validation`); None where the objective has no such view.
    - `learning_rates` gives named parameters (names as in the model's or the objective's
      `named_parameters()`) their own learning rate, e.g. a learnable temperature's log τ.

    The loop owns the rest: it moves every batch to the device (training and validation),
    and runs `evaluate` with the model and objective in eval mode under `torch.inference_mode()`.
    A `collate` that draws at random keeps its generator as `state_dict()`/`load_state_dict()`
    (see `stateful_parts`), so a resumed run draws what the uninterrupted run would have.
    A module of the model or the objective with a `project_()` method is projected back onto
    its allowed set after every optimizer step (e.g. log τ onto its clamp range).
    """

    model: nn.Module
    objective: nn.Module
    collate: Callable[[dict[str, np.ndarray]], Batch]
    export: Callable[[nn.Module, Path], None]
    evaluate: Optional[Callable[[nn.Module, Iterable[Batch], int], WeightedMetrics]] = None
    summarize: Callable[[dict[str, float]], dict[str, float]] = field(default=lambda metrics: metrics)
    regularizers: list[nn.Module] = field(default_factory=list)
    count_tokens: Callable[[Batch], int] = field(default=lambda batch: int(batch["attention_mask"].sum()))
    retrieval_view: Optional[Callable[[nn.Module], nn.Module]] = None
    learning_rates: dict[str, float] = field(default_factory=dict)

    def stateful_parts(self) -> dict[str, Stateful]:
        """The parts besides model and objective whose state a checkpoint must keep (per rank)."""
        return {"collate": self.collate} if isinstance(self.collate, Stateful) else {}

    def parameters(self) -> list[nn.Parameter]:
        """Every trainable parameter: the model's and the objective's own (e.g. a learnable temperature)."""
        seen: set[int] = set()
        params = []
        for module in (self.model, self.objective):
            for param in module.parameters():
                if param.requires_grad and id(param) not in seen:
                    seen.add(id(param))
                    params.append(param)
        return params


@dataclass
class PreparedData:
    """Driver-side result of reading a run's data: lazy datasets and a report."""

    datasets: dict[str, Any]
    train_examples: int
    metrics: dict[str, float]
    summary: str
    fingerprint: str
    report: dict[str, Any] = field(default_factory=dict)
    retrieval_set: Any = None  # a RetrievalSet for corpus-level validation, when the run configures one
    # True when the driver planned every training batch: `datasets` then holds one dataset per rank
    # (data.rank_batches.rank_dataset_name) instead of a "train" dataset to split
    planned_batches: bool = False
