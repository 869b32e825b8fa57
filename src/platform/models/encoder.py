"""`Encoder`: a Hugging Face encoder with a pooling head.

`encode` sorts texts by length so each batch pads only to its own longest text,
runs under `torch.inference_mode`, and returns float32 L2-normalised vectors in
the caller's order.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lmplatform.models.pooling import Pooling, pool
from lmplatform.models.resolve import DEFAULT_MODEL, resolve_model_path

logger = logging.getLogger(__name__)
ENCODER_CONFIG = "lmplatform_encoder.json"


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    path = resolve_model_path(str(name_or_path))
    return AutoTokenizer.from_pretrained(str(path))


class Encoder(nn.Module):
    def __init__(
        self,
        backbone: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        pooling: Pooling = "mean",
        max_seq_length: int = 128,
    ):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooling: Pooling = pooling
        self.max_seq_length = max_seq_length

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path = DEFAULT_MODEL,
        pooling: Optional[Pooling] = None,
        max_seq_length: Optional[int] = None,
    ) -> "Encoder":
        """Load an encoder; pooling and length default to what the folder was saved with."""
        path = resolve_model_path(str(name_or_path))
        saved = {}
        if (path / ENCODER_CONFIG).is_file():
            saved = json.loads((path / ENCODER_CONFIG).read_text())
        backbone = AutoModel.from_pretrained(str(path))
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        return cls(
            backbone,
            tokenizer,
            pooling=pooling or saved.get("pooling", "mean"),
            max_seq_length=max_seq_length or saved.get("max_seq_length", 128),
        )

    @property
    def dim(self) -> int:
        return int(self.backbone.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def tokenize(self, texts: Sequence[str], max_length: Optional[int] = None) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=max_length or self.max_seq_length,
            return_tensors="pt",
        )

    def token_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor) -> torch.Tensor:
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor) -> torch.Tensor:
        """Pooled, un-normalised text vectors [batch, dim]."""
        return pool(self.token_embeddings(input_ids, attention_mask, **extra), attention_mask, self.pooling)

    def encode(
        self,
        texts: Iterable[str],
        batch_size: int = 32,
        normalize: bool = True,
        show_progress: bool = False,
    ) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = np.argsort([-len(t) for t in texts], kind="stable")
        was_training = self.training
        self.eval()
        batches = range(0, len(texts), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="encode", unit="batch")
        device = self.device
        with torch.inference_mode():
            for start in batches:
                index = order[start : start + batch_size]
                features = self.tokenize([texts[i] for i in index])
                features = {k: v.to(device) for k, v in features.items()}
                vectors = self(**features).float()
                if normalize:
                    vectors = torch.nn.functional.normalize(vectors, dim=-1)
                out[index] = vectors.cpu().numpy()
        self.train(was_training)
        return out

    def save_pretrained(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        write_encoder_config(path, self.pooling, self.max_seq_length)
        return path


def write_encoder_config(path: Path, pooling: str, max_seq_length: int) -> None:
    (Path(path) / ENCODER_CONFIG).write_text(json.dumps({"pooling": pooling, "max_seq_length": max_seq_length}, indent=2))
