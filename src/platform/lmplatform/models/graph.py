"""What the exported graphs of an `Encoder` share (ONNX: `onnx_backend`; OpenVINO: `openvino_backend`).

A graph takes the tokenizer's tensors (`input_ids`, `attention_mask`, and `token_type_ids` where the model
uses them) and returns `sentence_embedding` [batch, dim]: the encoder's pooling and an L2 normalisation are
part of it, so a consumer with only the runtime and the tokenizer gets `Encoder.encode`'s vectors. A folder
holding a graph carries its `GraphConfig` (which file, which inputs, how it pools), the tokenizer, the model's
config.json and `lmplatform_encoder.json`, so `resolve_model_path` accepts it like any model folder.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol, TypeVar

import numpy as np

from lmplatform.models.encoder_config import write_encoder_config

if TYPE_CHECKING:
    import torch

    from lmplatform.models.encoder import Encoder

OUTPUT = "sentence_embedding"
TOKEN_OUTPUT = "last_hidden_state"
C = TypeVar("C", bound="GraphConfig")


@dataclass
class GraphConfig:
    """What a folder's graph expects and produces (written as the subclass's `FILE`)."""

    FILE: ClassVar[str] = ""

    file: str
    inputs: list[str]
    dim: int
    pooling: str
    max_seq_length: int
    normalized: bool = True
    quantization: Optional[str] = None
    keep_fp32: list[str] = field(default_factory=list)
    output: str = OUTPUT

    def write(self, folder: Path) -> None:
        (folder / self.FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls: type[C], folder: Path) -> C:
        return cls(**json.loads((folder / cls.FILE).read_text()))

    @classmethod
    def held_by(cls, folder: Path) -> bool:
        return (Path(folder) / cls.FILE).is_file()


class GraphSession(Protocol):
    """A runtime over a folder's graph: the tokenizer's tensors in, float32 vectors [batch, dim] out."""

    backend: str
    config: GraphConfig

    def run(self, features: dict[str, np.ndarray], precision: str = "fp32") -> np.ndarray: ...


def trace_inputs(encoder: "Encoder") -> tuple[dict[str, "torch.Tensor"], list[str]]:
    """A sample batch to trace the graph with, and the tokenizer's input names the graph takes."""
    if encoder.backbone is None or encoder.quantized:
        raise ValueError("export needs the fp32 PyTorch encoder (load it with backend='torch' and no quantize)")
    # Two texts of different lengths: the sample has padding, so the mask paths are traced too.
    sample = encoder.tokenizer(["an example text to trace the graph with", "short"], padding=True, return_tensors="pt")
    names = [n for n in encoder.tokenizer.model_input_names if n in sample]
    if "input_ids" not in names or "attention_mask" not in names:
        raise ValueError(f"the tokenizer produces {names}; a graph export needs input_ids and attention_mask")
    return dict(sample), names


def sentence_embedding_module(encoder: "Encoder", names: list[str], normalize: bool, token_output: bool = False) -> Any:
    """The module a graph is traced from: the encoder's tensors in, pooled (and normalised) vectors out; with
    `token_output`, (token embeddings, vectors): what a sentence-transformers consumer pools itself."""
    import torch
    from torch import nn

    from lmplatform.models.pooling import pool

    class SentenceEmbedding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, *tensors: torch.Tensor) -> Any:
            features = dict(zip(names, tensors))
            input_ids, attention_mask = features.pop("input_ids"), features.pop("attention_mask")
            tokens = self.encoder.token_embeddings(input_ids, attention_mask, **features)
            vectors = pool(tokens, attention_mask, self.encoder.pooling)
            vectors = torch.nn.functional.normalize(vectors, dim=-1) if normalize else vectors
            return (tokens, vectors) if token_output else vectors

    return SentenceEmbedding().eval()


def write_model_files(encoder: "Encoder", folder: Path) -> None:
    """The tokenizer, config.json and `lmplatform_encoder.json` beside a graph."""
    encoder.tokenizer.save_pretrained(str(folder))
    encoder.backbone.config.save_pretrained(str(folder))
    write_encoder_config(folder, encoder.pooling, encoder.max_seq_length)
