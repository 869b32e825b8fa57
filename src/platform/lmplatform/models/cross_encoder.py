"""`CrossEncoder`: query and document in one sequence, one relevance logit out.

Any Hugging Face sequence-classification folder with one label works (our own
trained re-rankers, or a checkpoint from elsewhere). Loading an encoder-only
folder (e.g. the packaged MiniLM) initialises a new 1-logit head for training.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import DEFAULT_MODEL, resolve_model_path


class CrossEncoder(nn.Module):
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_seq_length: int = 256):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path = DEFAULT_MODEL, max_seq_length: int = 256) -> "CrossEncoder":
        path = resolve_model_path(str(name_or_path))
        with quiet_transformers():  # a new classifier head is expected when starting from an encoder
            model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1)
        return cls(model, AutoTokenizer.from_pretrained(str(path)), max_seq_length)

    def tokenize(self, queries: Sequence[str], documents: Sequence[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(queries), list(documents), padding=True, truncation="longest_first",
            max_length=self.max_seq_length, return_tensors="pt",
        )

    def forward(self, **features: torch.Tensor) -> torch.Tensor:
        """Relevance logits [batch]."""
        return self.model(**features).logits.squeeze(-1)

    def score(self, queries: Sequence[str], documents: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Relevance probabilities (sigmoid of the logit) for aligned (query, document) pairs."""
        return self._score(queries, documents, batch_size, probabilities=True)

    def logits(self, queries: Sequence[str], documents: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Relevance logits for aligned (query, document) pairs: what a distilled student learns (the sigmoid
        flattens the margins between confident scores)."""
        return self._score(queries, documents, batch_size, probabilities=False)

    def _score(self, queries: Sequence[str], documents: Sequence[str], batch_size: int, probabilities: bool) -> np.ndarray:
        if len(queries) != len(documents):
            raise ValueError(f"{len(queries)} queries but {len(documents)} documents; pairs must align")
        out = np.zeros(len(queries), dtype=np.float32)
        # Sorting by length keeps padding per batch small.
        order = np.argsort([-(len(q) + len(d)) for q, d in zip(queries, documents)], kind="stable")
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                index = order[start : start + batch_size]
                features = self.tokenize([queries[i] for i in index], [documents[i] for i in index])
                logits = self(**{k: v.to(device) for k, v in features.items()}).float()
                out[index] = (torch.sigmoid(logits) if probabilities else logits).cpu().numpy()
        self.train(was_training)
        return out

    def rerank(self, query: str, candidates: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Scores of each candidate for one query, in the candidates' order."""
        return self.score([query] * len(candidates), list(candidates), batch_size)

    def save_pretrained(self, path: str | Path, max_seq_length: Optional[int] = None) -> Path:
        path = Path(path)
        self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        return path
