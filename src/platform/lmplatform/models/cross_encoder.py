"""`CrossEncoder`: query and document in one sequence, one relevance logit out.

Any Hugging Face sequence-classification folder with one label works (our own
trained re-rankers, or a checkpoint from elsewhere). Loading an encoder-only
folder (e.g. the packaged MiniLM) initialises a new 1-logit head for training.
`save_pretrained` records the pair length the model was trained with
(`lmplatform_cross_encoder.json`); loading without a length uses it, so a re-ranker
trained on 128-token pairs scores 128-token pairs wherever it is loaded.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import DEFAULT_MODEL, resolve_model_path

CROSS_ENCODER_CONFIG = "lmplatform_cross_encoder.json"
DEFAULT_MAX_SEQ_LENGTH = 256  # a folder that records none (a checkpoint from elsewhere, or saved before the record)


class CrossEncoder(nn.Module):
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path = DEFAULT_MODEL, max_seq_length: Optional[int] = None) -> "CrossEncoder":
        """`max_seq_length` None: the length the folder records (`save_pretrained`), else 256."""
        path = resolve_model_path(str(name_or_path))
        with quiet_transformers():  # a new classifier head is expected when starting from an encoder
            model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1)
        record = Path(path) / CROSS_ENCODER_CONFIG
        saved = json.loads(record.read_text()).get("max_seq_length") if record.is_file() else None
        return cls(model, AutoTokenizer.from_pretrained(str(path)), max_seq_length or saved or DEFAULT_MAX_SEQ_LENGTH)

    def tokenize(self, queries: Sequence[str], documents: Sequence[str]) -> dict[str, torch.Tensor]:
        """[CLS] query [SEP] document [SEP], cut to max_seq_length by dropping from the longer side first."""
        return self.tokenizer(
            *self._cut(queries, documents), padding=True, truncation="longest_first",
            max_length=self.max_seq_length, return_tensors="pt",
        )

    def _cut(self, queries: Sequence[str], documents: Sequence[str]) -> tuple[list[str], list[str]]:
        """Both sides of each pair cut at the end of a token, to about 2 x max_seq_length tokens, the longer side one
        token longer than the other, so the pair truncation that follows keeps what it would have kept of the whole
        texts: it drops one token at a time and copies the overflow each time, which takes two 100k-character reports
        30 s and 10 GB. (A word-piece tokenizer splits a prefix as it splits the whole; a BPE or unigram one may
        re-split only a word that runs across the cut.)"""
        if not self.tokenizer.is_fast:  # no offsets to cut at
            return list(queries), list(documents)
        keep = 2 * self.max_seq_length
        with quiet_transformers():  # whole texts on purpose: it would warn that they exceed the model's length
            query_spans, document_spans = (
                self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
                for texts in (queries, documents))

        def cut(text: str, spans: list[tuple[int, int]], other_length: int) -> str:
            kept = min(len(spans), keep + (len(spans) > other_length))
            return text if kept == len(spans) else text[: spans[kept - 1][1]]

        return ([cut(q, qs, len(ds)) for q, qs, ds in zip(queries, query_spans, document_spans)],
                [cut(d, ds, len(qs)) for d, qs, ds in zip(documents, query_spans, document_spans)])

    def head_parameter_names(self) -> list[str]:
        """Names (as in `named_parameters()`) of the relevance head: every parameter outside the backbone (BERT's
        classifier, RoBERTa's dense + out_proj) and the backbone's pooler where it has one (BERT pools [CLS] through
        it; a sentence-embedding checkpoint such as MiniLM never trained it)."""
        backbone = self.model.base_model
        pooler = getattr(backbone, "pooler", None)
        body = {id(p) for p in backbone.parameters()} - {id(p) for p in (pooler.parameters() if pooler is not None else ())}
        return [name for name, param in self.named_parameters() if id(param) not in body]

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

    def save_pretrained(self, path: str | Path) -> Path:
        path = Path(path)
        self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        (path / CROSS_ENCODER_CONFIG).write_text(json.dumps({"max_seq_length": self.max_seq_length}, indent=2))
        return path
