"""Word and relation vectors from an encoder, and KNN NER / relation extraction over them."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from lmplatform.graph.data import (
    OUTSIDE,
    Entity,
    EntityPooling,
    Sentence,
    WordPooling,
    align_words,
    bio_tags,
    decode_bio,
    entity_words,
)
from lmplatform.graph.metrics import RelationKey, boundary_free_relation_scores, strict_scores
from lmplatform.graph.negatives import sample_negative_graph
from lmplatform.retrieval.faiss_import import import_faiss

NO_RELATION = "none"


@torch.inference_mode()
def encode_words(
    backbone: torch.nn.Module,
    tokenizer: object,
    sentences: Sequence[Sentence],
    word_pooling: WordPooling = "first",
    max_length: int = 128,
    batch_size: int = 32,
) -> list[np.ndarray]:
    """Per sentence a [words, dim] float32 array; words cut off by max_length are NaN rows."""
    backbone.eval()
    device = next(backbone.parameters()).device
    order = np.argsort([-len(s.tokens) for s in sentences], kind="stable")
    out: list[Optional[np.ndarray]] = [None] * len(sentences)
    for start in range(0, len(sentences), batch_size):
        index = order[start : start + batch_size]
        aligned = align_words(tokenizer, [sentences[i].tokens for i in index], max_length)
        hidden = backbone(input_ids=aligned.input_ids.to(device),
                          attention_mask=aligned.attention_mask.to(device)).last_hidden_state
        hidden = hidden.float().cpu().numpy()
        for row, i in enumerate(index):
            vectors = np.full((len(sentences[i].tokens), hidden.shape[-1]), np.nan, dtype=np.float32)
            for w, positions in enumerate(aligned.word_positions[row]):
                if positions:
                    picked = positions[:1] if word_pooling == "first" else positions
                    vectors[w] = hidden[row, picked].mean(0)
            out[i] = vectors
    return out  # type: ignore[return-value]


def span_vector(words: np.ndarray, entity: Entity, pooling: EntityPooling) -> np.ndarray:
    return words[entity_words(entity, pooling)].mean(0)


def pair_vector(words: np.ndarray, head: Entity, tail: Entity, pooling: EntityPooling) -> np.ndarray:
    return np.concatenate([span_vector(words, head, pooling), span_vector(words, tail, pooling)])


def _normalize(x: np.ndarray) -> np.ndarray:
    x = np.nan_to_num(x.astype(np.float32))
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class KNNIndex:
    """Cosine nearest neighbours (exact, FAISS inner product over normalised vectors) with majority vote."""

    def __init__(self, vectors: np.ndarray, labels: Sequence[str]):
        faiss = import_faiss()
        self.labels = np.asarray(labels, dtype=object)
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(_normalize(vectors))

    def neighbours(self, queries: np.ndarray, k: int) -> np.ndarray:
        k = min(k, self.index.ntotal)
        _, ids = self.index.search(_normalize(queries), k)
        return ids

    def vote(self, neighbour_ids: np.ndarray, k: int) -> list[str]:
        """Majority label among the first k neighbours; ties go to the label of the nearest one."""
        out = []
        for row in neighbour_ids[:, :k]:
            labels = self.labels[row[row >= 0]]
            counts = Counter(labels)
            best = max(counts.values())
            out.append(next(label for label in labels if counts[label] == best))
        return out


@dataclass
class RelationSchema:
    """Which (head type, tail type) pairs can carry a relation, learnt from the training data."""

    signatures: set[tuple[str, str]]

    @classmethod
    def from_sentences(cls, sentences: Sequence[Sentence]) -> "RelationSchema":
        return cls({(s.entities[r.head].type, s.entities[r.tail].type) for s in sentences for r in s.relations})

    def candidates(self, entities: Sequence[Entity]) -> list[tuple[int, int]]:
        return [(h, t) for h, a in enumerate(entities) for t, b in enumerate(entities)
                if h != t and (a.type, b.type) in self.signatures]


def gold_entities(sentences: Sequence[Sentence]) -> list[tuple[str, int, int, str]]:
    return [(s.id, e.start, e.end, e.type) for s in sentences for e in s.entities]


def gold_relations(sentences: Sequence[Sentence]) -> list[RelationKey]:
    return [(s.id, s.entities[r.head], s.entities[r.tail], r.type) for s in sentences for r in s.relations]


def word_training_set(sentences: Sequence[Sentence], vectors: Sequence[np.ndarray]) -> tuple[np.ndarray, list[str]]:
    xs, ys = [], []
    for sentence, words in zip(sentences, vectors):
        keep = ~np.isnan(words).any(1)
        xs.append(words[keep])
        ys.extend(tag for tag, k in zip(bio_tags(sentence), keep) if k)
    return np.concatenate(xs), ys


def relation_training_set(sentences: Sequence[Sentence], vectors: Sequence[np.ndarray], schema: RelationSchema,
                          pooling: EntityPooling) -> tuple[np.ndarray, list[str]]:
    """Every candidate pair of gold entities, labelled with its relation type or `none`."""
    xs, ys = [], []
    for sentence, words in zip(sentences, vectors):
        labels = {(r.head, r.tail): r.type for r in sentence.relations}
        for h, t in schema.candidates(sentence.entities):
            vector = pair_vector(words, sentence.entities[h], sentence.entities[t], pooling)
            if not np.isnan(vector).any():
                xs.append(vector)
                ys.append(labels.get((h, t), NO_RELATION))
    return np.stack(xs), ys


@dataclass
class KNNExtractor:
    """KNN NER (word -> BIO tag, decoded to spans) followed by KNN relation classification of candidate pairs."""

    words: KNNIndex
    relations: KNNIndex
    schema: RelationSchema
    entity_pooling: EntityPooling

    @classmethod
    def fit(cls, sentences: Sequence[Sentence], ner_vectors: Sequence[np.ndarray], re_vectors: Sequence[np.ndarray],
            entity_pooling: EntityPooling) -> "KNNExtractor":
        schema = RelationSchema.from_sentences(sentences)
        words = KNNIndex(*word_training_set(sentences, ner_vectors))
        relations = KNNIndex(*relation_training_set(sentences, re_vectors, schema, entity_pooling))
        return cls(words, relations, schema, entity_pooling)

    def predict_entities(self, sentences: Sequence[Sentence], vectors: Sequence[np.ndarray], k: int,
                         max_k: int) -> list[list[Entity]]:
        stacked = np.concatenate(vectors)
        tags = self.words.vote(self.words.neighbours(stacked, max_k), k)
        out, offset = [], 0
        for _sentence, words in zip(sentences, vectors):
            sentence_tags = [tag if not np.isnan(words[i]).any() else OUTSIDE
                             for i, tag in enumerate(tags[offset : offset + len(words)])]
            out.append(decode_bio(sentence_tags))
            offset += len(words)
        return out

    def predict_relations(self, sentences: Sequence[Sentence], vectors: Sequence[np.ndarray],
                          entities: Sequence[Sequence[Entity]], k: int, max_k: int) -> list[RelationKey]:
        keys, xs = [], []
        for sentence, words, found in zip(sentences, vectors, entities):
            for h, t in self.schema.candidates(found):
                vector = pair_vector(words, found[h], found[t], self.entity_pooling)
                if not np.isnan(vector).any():
                    keys.append((sentence.id, found[h], found[t]))
                    xs.append(vector)
        if not xs:
            return []
        labels = self.relations.vote(self.relations.neighbours(np.stack(xs), max_k), k)
        return [(sid, head, tail, label) for (sid, head, tail), label in zip(keys, labels) if label != NO_RELATION]


def score_extraction(sentences: Sequence[Sentence], entities: Sequence[Sequence[Entity]],
                     relations: Sequence[RelationKey]) -> dict[str, float]:
    predicted_entities = [(s.id, e.start, e.end, e.type) for s, found in zip(sentences, entities) for e in found]
    ner = strict_scores(gold_entities(sentences), predicted_entities)
    gold = gold_relations(sentences)
    re_strict = strict_scores(gold, relations)
    re_free = boundary_free_relation_scores(gold, relations)
    return {"ner_macro_f1": ner["macro_f1"], "re_macro_f1": re_strict["macro_f1"], "re_minus_macro_f1": re_free["macro_f1"],
            "ner_macro_precision": ner["macro_precision"], "ner_macro_recall": ner["macro_recall"],
            "re_macro_precision": re_strict["macro_precision"], "re_macro_recall": re_strict["macro_recall"]}


def choose_k(score: "callable", candidates: Sequence[int]) -> tuple[int, dict[int, float]]:
    """The k with the best validation score (smallest k on ties)."""
    scores = {k: score(k) for k in candidates}
    best = max(scores.values())
    return min(k for k, v in scores.items() if v == best), scores


def split_validation(sentences: Sequence[Sentence], fraction: float, seed: int) -> tuple[list[Sentence], list[Sentence]]:
    """A seeded random `fraction` of a fold's training sentences for choosing k."""
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(round(fraction * len(sentences)))) if len(sentences) > 1 else 0
    val = set(order[:n_val])
    return [s for i, s in enumerate(sentences) if i not in val], [s for i, s in enumerate(sentences) if i in val]


def probe_set(sentences: Sequence[Sentence], vectors: Sequence[np.ndarray], pooling: EntityPooling, seed: int,
              negatives_per_relation: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Relation candidates for the linear probe: gold relations (1) and their hard negatives (0)."""
    rng = random.Random(seed)
    xs, ys = [], []
    for sentence, words in zip(sentences, vectors):
        for relation in sentence.relations:
            xs.append(pair_vector(words, sentence.entities[relation.head], sentence.entities[relation.tail], pooling))
            ys.append(1)
        for _ in range(negatives_per_relation):
            for negative in sample_negative_graph(sentence, rng):
                if not negative.valid:
                    continue
                spans = []
                for argument in (negative.head, negative.tail):
                    start, end = argument.words(sentence)
                    entity = sentence.entities[argument.entity] if argument.entity is not None else Entity(start, end, "word")
                    spans.append(entity)
                xs.append(pair_vector(words, spans[0], spans[1], pooling))
                ys.append(0)
    x = np.stack(xs)
    keep = ~np.isnan(x).any(1)
    return x[keep], np.asarray(ys)[keep]


def linear_probe(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], seed: int = 0) -> dict[str, float]:
    """Logistic regression on frozen relation vectors; precision/recall/F1 of the relation class."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import precision_recall_fscore_support
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train[0])
    model = LogisticRegression(max_iter=2000, random_state=seed).fit(scaler.transform(train[0]), train[1])
    predicted = model.predict(scaler.transform(test[0]))
    p, r, f, _ = precision_recall_fscore_support(test[1], predicted, average="binary", pos_label=1, zero_division=0)
    return {"precision": float(p), "recall": float(r), "f1": float(f)}
