"""A seeded sample of a corpus's cleaned texts, read in this process (evaluations, Fisher diagonals)."""
from __future__ import annotations

import random

from lmplatform.config.schema import DataConfig
from lmplatform.data.corpus import local_documents, scan_corpus


def sample_texts(data: DataConfig, n: int, seed: int, split: str = "train") -> list[str]:
    """Up to `n` documents of one split of `data` (the same hash split training uses), a seeded sample."""
    texts = list(local_documents(scan_corpus(data, use_ray=False), split))
    if len(texts) > n:
        texts = random.Random(seed).sample(texts, n)
    return texts
