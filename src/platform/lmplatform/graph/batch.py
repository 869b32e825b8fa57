"""Collate ADE sentences into tensors: token ids plus gather indices for entities, relations and negatives.

A "node" is a word-span vector read off the token embeddings: flat position indices into the
[batch * seq] token matrix and their weights (first sub-word or mean of sub-words, last word or mean of
words). Relations and hard-negative relations index into the node table, so the objective gathers each
vector once whatever the variant.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import torch

from lmplatform.graph.data import (
    EntityPooling,
    Sentence,
    WordPooling,
    align_words,
    bio_tags,
    entity_words,
    words_weights,
)
from lmplatform.graph.negatives import Argument, sample_negative_graphs


@dataclass
class _NodeTable:
    seq_len: int
    keys: dict[tuple[int, str, int], int] = field(default_factory=dict)
    weights: list[dict[int, float]] = field(default_factory=list)

    def add(self, key: tuple[int, str, int], flat_weights: dict[int, float]) -> Optional[int]:
        if not flat_weights:
            return None  # truncated away
        if key not in self.keys:
            self.keys[key] = len(self.weights)
            self.weights.append(flat_weights)
        return self.keys[key]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        width = max((len(w) for w in self.weights), default=1)
        index = torch.zeros(len(self.weights), width, dtype=torch.long)
        weight = torch.zeros(len(self.weights), width)
        for i, w in enumerate(self.weights):
            index[i, : len(w)] = torch.tensor(list(w.keys()), dtype=torch.long)
            weight[i, : len(w)] = torch.tensor(list(w.values()))
        return index, weight


def gather_nodes(token_embeddings: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[batch, seq, dim] token vectors -> [nodes, dim] weighted sums at flat positions."""
    flat = token_embeddings.reshape(-1, token_embeddings.shape[-1])
    return (flat[index] * weight.unsqueeze(-1).to(flat.dtype)).sum(1)


class GraphCollator:
    """Ray Data numpy batch with a `sentence` JSON column -> tensors for `GraphContrastiveObjective`."""

    def __init__(
        self,
        tokenizer: Any,
        max_length: int,
        negatives_per_sentence: int = 3,
        entity_pooling: EntityPooling = "last",
        word_pooling: WordPooling = "first",
        samples_per_tag: int = 16,
        with_words: bool = False,
        seed: Optional[int] = None,
    ):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.negatives = negatives_per_sentence
        self.entity_pooling = entity_pooling
        self.word_pooling = word_pooling
        self.samples_per_tag = samples_per_tag
        self.with_words = with_words
        self.seed = seed

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return self.collate([Sentence.from_json(str(s)) for s in batch["sentence"]])

    def _rng(self) -> random.Random:
        # Seeded from torch's generator, which each worker seeds per rank: reproducible, different per rank.
        return random.Random(self.seed if self.seed is not None else int(torch.randint(0, 2**31 - 1, (1,))))

    def collate(self, sentences: Sequence[Sentence]) -> dict[str, torch.Tensor]:
        rng = self._rng()
        aligned = align_words(self.tokenizer, [s.tokens for s in sentences], self.max_length)
        nodes = _NodeTable(aligned.seq_len)
        rel_nodes: list[tuple[int, int]] = []
        rel_sentence: list[int] = []
        neg_nodes: list[list[tuple[int, int]]] = []
        neg_valid: list[list[bool]] = []

        def node(b: int, argument: Argument) -> Optional[int]:
            sentence, positions = sentences[b], aligned.word_positions[b]
            if argument.entity is not None:
                words = entity_words(sentence.entities[argument.entity], self.entity_pooling)
                key = (b, "entity", argument.entity)
            else:
                words, key = [argument.word], (b, "word", argument.word)
            local = words_weights(positions, words, self.word_pooling)
            return nodes.add(key, {b * aligned.seq_len + p: w for p, w in local.items()})

        for b, sentence in enumerate(sentences):
            graphs = sample_negative_graphs(sentence, self.negatives, rng)
            for r, relation in enumerate(sentence.relations):
                head, tail = node(b, Argument(entity=relation.head)), node(b, Argument(entity=relation.tail))
                if head is None or tail is None:
                    continue  # an argument lies beyond max_length
                negs, valid = [], []
                for graph in graphs:
                    neg = graph[r]
                    nh, nt = node(b, neg.head), node(b, neg.tail)
                    ok = neg.valid and nh is not None and nt is not None
                    negs.append((nh, nt) if ok else (head, tail))
                    valid.append(ok)
                rel_nodes.append((head, tail))
                rel_sentence.append(b)
                neg_nodes.append(negs)
                neg_valid.append(valid)

        node_index, node_weight = nodes.tensors()
        z = self.negatives
        out = {
            "input_ids": aligned.input_ids,
            "attention_mask": aligned.attention_mask,
            "node_index": node_index,
            "node_weight": node_weight,
            "rel_nodes": torch.tensor(rel_nodes, dtype=torch.long).reshape(-1, 2),
            "rel_sentence": torch.tensor(rel_sentence, dtype=torch.long),
            "neg_nodes": torch.tensor(neg_nodes, dtype=torch.long).reshape(-1, z, 2),
            "neg_valid": torch.tensor(neg_valid, dtype=torch.bool).reshape(-1, z),
        }
        if self.with_words:
            out |= self._balanced_words(sentences, aligned, rng)
        return out

    def _balanced_words(self, sentences: Sequence[Sentence], aligned: Any, rng: random.Random) -> dict[str, torch.Tensor]:
        """Up to `samples_per_tag` words per BIO tag from the batch (CLNER's balanced sample)."""
        by_tag: dict[str, list[dict[int, float]]] = {}
        for b, sentence in enumerate(sentences):
            for w, tag in enumerate(bio_tags(sentence)):
                local = words_weights(aligned.word_positions[b], [w], self.word_pooling)
                if local:
                    by_tag.setdefault(tag, []).append({b * aligned.seq_len + p: v for p, v in local.items()})
        table = _NodeTable(aligned.seq_len)
        labels: list[int] = []
        for label, tag in enumerate(sorted(by_tag)):
            chosen = rng.sample(by_tag[tag], min(self.samples_per_tag, len(by_tag[tag])))
            for weights in chosen:
                table.weights.append(weights)
                labels.append(label)
        index, weight = table.tensors()
        return {"word_index": index, "word_weight": weight, "word_label": torch.tensor(labels, dtype=torch.long)}
