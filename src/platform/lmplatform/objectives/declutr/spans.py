"""DeCLUTR's span sampling (Giorgi et al., 2021), and how many documents of a corpus it can sample.

Per document, `DeclutrSpanSampler` draws A_N anchor spans with lengths from
Beta(4, 2) and, per anchor, P positive spans with lengths from Beta(2, 4), both
scaled to [min_span, max_span]. A positive starts anywhere from "ends where the
anchor starts" to "starts where the anchor ends", so it may be adjacent to the
anchor, overlap it or lie inside it. A document needs 2·A_N·max_span tokens
(`count_sampleable`, `span_report`: `lmp data span-report`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from lmplatform.data.corpus import TRAIN, VALIDATION, CorpusPlan, local_documents

Span = tuple[int, int]  # [start, end) in the document's token ids


@dataclass(frozen=True)
class DocumentSpans:
    anchors: list[Span]
    positives: list[list[Span]]  # positives[i] belong to anchors[i]


class DeclutrSpanSampler:
    def __init__(self, num_anchors: int = 2, num_positives: int = 1, min_span: int = 32, max_span: int = 512):
        if not 1 <= min_span <= max_span:
            raise ValueError(f"need 1 <= min_span <= max_span, got {min_span} and {max_span}")
        self.num_anchors = num_anchors
        self.num_positives = num_positives
        self.min_span = min_span
        self.max_span = max_span

    @property
    def min_document_tokens(self) -> int:
        """Shorter documents cannot be sampled (the DeCLUTR paper's 2·A_N·max_span rule)."""
        return 2 * self.num_anchors * self.max_span

    def can_sample(self, num_tokens: int) -> bool:
        return num_tokens >= self.min_document_tokens

    def _length(self, rng: np.random.Generator, a: float, b: float) -> int:
        return int(np.floor(rng.beta(a, b) * (self.max_span - self.min_span + 1))) + self.min_span

    def anchor_length(self, rng: np.random.Generator) -> int:
        return min(self._length(rng, 4.0, 2.0), self.max_span)

    def positive_length(self, rng: np.random.Generator) -> int:
        return min(self._length(rng, 2.0, 4.0), self.max_span)

    def sample(self, num_tokens: int, rng: np.random.Generator) -> DocumentSpans:
        if not self.can_sample(num_tokens):
            raise ValueError(f"a document of {num_tokens} tokens is under the minimum of {self.min_document_tokens}")
        anchors, positives = [], []
        for _ in range(self.num_anchors):
            length = self.anchor_length(rng)
            start = int(rng.integers(0, num_tokens - length + 1))
            anchors.append((start, start + length))
            own = []
            for _ in range(self.num_positives):
                p_length = self.positive_length(rng)
                low = max(0, start - p_length)
                high = min(start + length, num_tokens - p_length)
                p_start = int(rng.integers(low, high + 1))
                own.append((p_start, p_start + p_length))
            positives.append(own)
        return DocumentSpans(anchors, positives)


@dataclass
class SpanCounts:
    """How many documents of a set can be sampled for one max_span (the span report row)."""

    max_span: int
    min_tokens: int
    kept: int
    dropped: int

    @property
    def dropped_fraction(self) -> float:
        total = self.kept + self.dropped
        return self.dropped / total if total else 0.0


def count_sampleable(token_lengths: Sequence[int], num_anchors: int, max_span: int) -> SpanCounts:
    lengths = np.asarray(token_lengths, dtype=np.int64)
    minimum = 2 * num_anchors * max_span
    kept = int((lengths >= minimum).sum())
    return SpanCounts(max_span, minimum, kept, int(len(lengths) - kept))


_TOKENIZE_CHUNK = 512


def token_lengths(texts: Iterable[str], tokenizer: Any) -> list[int]:
    """Tokens per text without special tokens, tokenised in chunks."""
    lengths: list[int] = []
    chunk: list[str] = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == _TOKENIZE_CHUNK:
            lengths.extend(len(ids) for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"])
            chunk = []
    if chunk:
        lengths.extend(len(ids) for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"])
    return lengths


def span_report(corpus: CorpusPlan, tokenizer: Any, num_anchors: int, max_spans: Sequence[int]) -> dict[str, list[SpanCounts]]:
    """For each split and max span: documents that can / cannot be sampled."""
    report = {}
    for split in (TRAIN, VALIDATION):
        lengths = token_lengths(local_documents(corpus, split), tokenizer)
        if lengths:
            report[split] = [count_sampleable(lengths, num_anchors, span) for span in max_spans]
    return report


@functools.lru_cache(maxsize=2)
def cached_tokenizer(path: str) -> Any:
    """The model's tokenizer, loaded once per process. Imported on first use, not with this module: Ray Data's
    coordinator processes unpickle `keep_sampleable` with a dataset's plan and never call it, so they import
    this module only, not torch and transformers."""
    from lmplatform.models.encoder import load_tokenizer

    return load_tokenizer(path)


def keep_sampleable(batch: dict[str, np.ndarray], tokenizer_path: str, min_tokens: int) -> dict[str, np.ndarray]:
    """Ray Data map: drop the rows whose text has fewer than min_tokens tokens."""
    lengths = np.array(token_lengths([str(t) for t in batch["text"]], cached_tokenizer(tokenizer_path)), dtype=np.int64)
    keep = lengths >= min_tokens
    return {name: column[keep] for name, column in batch.items()}
