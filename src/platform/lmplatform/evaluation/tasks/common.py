"""What the evaluation tasks share: the `TaskResult` contract, a model cache, `EncoderSpec` and a name check.

Torch-free: the task configs import it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Protocol

from pydantic import Field

from lmplatform.config.base import Section


def unique_names(what: str, items: list[Any]) -> None:
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names must be unique, got {names}")


class EncoderSpec(Section):
    """An encoder to evaluate (sts, classification)."""

    name: str = Field(..., min_length=1, description="Label in reports and metric names.")
    model: str = Field(..., min_length=1, description="'default', a folder, or models:/name@alias.")
    quantize: Optional[Literal["int8"]] = None
    batch_size: int = Field(32, ge=1)
    max_seq_length: Optional[int] = Field(None, ge=8)


@dataclass
class TaskResult:
    """What a task hands the evaluation runner (the contract every task follows)."""

    task: str
    metrics: dict[str, float]  # flat, logged to MLflow
    markdown: str  # a section of report.md
    details: dict[str, Any]  # goes to report.json
    artifacts: list[Path] = field(default_factory=list)  # PNGs and other files in the output folder


class EncoderRef(Protocol):
    """Any spec naming an encoder: `RetrieverSpec`, `EncoderSpec`."""

    model: Optional[str]
    quantize: Optional[str]
    max_seq_length: Optional[int]


class ModelCache:
    """Loads each (model, quantize, max_seq_length) once per evaluation, shared by all its tasks."""

    def __init__(self) -> None:
        self._encoders: dict[tuple, Any] = {}
        self._rerankers: dict[str, Any] = {}

    def encoder(self, spec: EncoderRef) -> Any:
        from lmplatform.models.encoder import Encoder

        key = (spec.model, spec.quantize, spec.max_seq_length)
        if key not in self._encoders:
            self._encoders[key] = Encoder.from_pretrained(spec.model, max_seq_length=spec.max_seq_length, quantize=spec.quantize)
        return self._encoders[key]

    def reranker(self, path: str) -> Any:
        from lmplatform.models.cross_encoder import CrossEncoder

        if path not in self._rerankers:
            self._rerankers[path] = CrossEncoder.from_pretrained(path)
        return self._rerankers[path]
