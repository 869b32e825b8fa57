"""What the generic training loop needs from an objective, and nothing more."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
from torch import nn

Batch = dict[str, torch.Tensor]
WeightedMetrics = dict[str, tuple[float, float]]


@dataclass
class TrainingRecipe:
    """The model to optimise, the objective that scores it, and how data becomes batches.

    - `objective(model, batch)` returns (loss, metrics).
    - `collate` turns a Ray Data numpy batch into tensors.
    - `export(model, folder)` writes the final model as a Hugging Face folder.
    - `evaluate(model, batches, rank)` returns {metric: (sum, weight)} so workers can be reduced;
      `summarize` derives further metrics (e.g. perplexity) from the reduced means.
    - `regularizers` each return (loss, metrics) from the model alone (e.g. an EWC penalty).
    - `retrieval_view(model)` is the model as an `Encoder` or a `CrossEncoder`, for corpus-level
      retrieval validation (`retrieval_validation`); None where the objective has no such view.
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
