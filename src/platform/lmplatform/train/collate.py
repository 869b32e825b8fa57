"""Tokenising collators for Ray Data batches."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase


class TextCollator:
    """Tokenise a `text` column with dynamic padding (to a multiple of 8)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int, with_word_ids: bool = False, column: str = "text"):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.with_word_ids = with_word_ids
        self.column = column

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return self.encode([str(t) for t in batch[self.column]])

    def encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        features = self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            pad_to_multiple_of=8,
            return_tensors="pt",
        )
        out = {"input_ids": features["input_ids"], "attention_mask": features["attention_mask"]}
        if self.with_word_ids:
            word_ids = [[-1 if w is None else w for w in features.word_ids(i)] for i in range(len(texts))]
            out["word_ids"] = torch.tensor(word_ids, dtype=torch.long)
        return out
