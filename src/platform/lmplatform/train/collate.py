"""Tokenising collators for Ray Data batches."""
from __future__ import annotations

from functools import cache
from typing import Optional, Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase


@cache
def pad_multiple() -> Optional[int]:
    """The multiple every collated batch's length is padded to: 8 in a process that sees a CUDA device, where
    tensor cores run fp16/bf16 matrix products on multiples of 8; none on CPU, where the extra padding is
    only extra work. A CPU worker on a GPU machine pads to 8 as well (Ray 2.60 leaves the GPUs visible to a
    worker that asked for none): the cost of a few padding tokens, never a wrong result."""
    return 8 if torch.cuda.is_available() else None


class TextCollator:
    """Tokenise a `text` column with dynamic padding (to `pad_multiple()`)."""

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
            pad_to_multiple_of=pad_multiple(),
            return_tensors="pt",
        )
        out = {"input_ids": features["input_ids"], "attention_mask": features["attention_mask"]}
        if self.with_word_ids:
            word_ids = [[-1 if w is None else w for w in features.word_ids(i)] for i in range(len(texts))]
            out["word_ids"] = torch.tensor(word_ids, dtype=torch.long)
        return out
