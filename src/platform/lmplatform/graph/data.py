"""ADE-format sentences: reading with validation, folds, BIO tags and word -> sub-word alignment.

One sentence per JSONL line: `tokens` (list of str), `entities` ({start, end, type}, token offsets,
end exclusive) and `relations` ({head, tail, type}, indices into `entities`). SpERT split files (a JSON
array of the same objects, optionally gzipped) are read too. A malformed sentence is a `BadRow`
(file:line and reason), counted and skipped, or an error under on_bad_row="fail".
"""
from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Optional, Sequence

from lmplatform.data.readers import BadRow, DataError, Record, expand_paths, read_rows

OUTSIDE = "O"
EntityPooling = Literal["last", "mean"]
WordPooling = Literal["first", "mean"]


@dataclass(frozen=True)
class Entity:
    start: int
    end: int  # exclusive
    type: str


@dataclass(frozen=True)
class Relation:
    head: int  # index into Sentence.entities
    tail: int
    type: str


@dataclass(frozen=True)
class Sentence:
    id: str
    tokens: tuple[str, ...]
    entities: tuple[Entity, ...]
    relations: tuple[Relation, ...]

    def to_json(self) -> str:
        return json.dumps({
            "id": self.id,
            "tokens": list(self.tokens),
            "entities": [{"start": e.start, "end": e.end, "type": e.type} for e in self.entities],
            "relations": [{"head": r.head, "tail": r.tail, "type": r.type} for r in self.relations],
        })

    @classmethod
    def from_json(cls, text: str) -> "Sentence":
        return parse_sentence(json.loads(text), default_id="")


def parse_sentence(fields: dict[str, Any], default_id: str) -> Sentence:
    """Validate one record; raises ValueError naming what is wrong."""
    tokens = fields.get("tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ValueError("'tokens' must be a non-empty list")
    if not all(isinstance(t, str) and t for t in tokens):
        raise ValueError("every token must be a non-empty string")
    entities: list[Entity] = []
    for i, raw in enumerate(fields.get("entities") or []):
        try:
            start, end, kind = int(raw["start"]), int(raw["end"]), str(raw["type"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"entity {i} needs integer 'start', 'end' and a 'type'") from None
        if not 0 <= start < end <= len(tokens):
            raise ValueError(f"entity {i} span [{start}, {end}) is out of range for {len(tokens)} tokens")
        entities.append(Entity(start, end, kind))
    relations: list[Relation] = []
    for i, raw in enumerate(fields.get("relations") or []):
        try:
            head, tail, kind = int(raw["head"]), int(raw["tail"]), str(raw["type"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"relation {i} needs integer 'head', 'tail' and a 'type'") from None
        for side, index in (("head", head), ("tail", tail)):
            if not 0 <= index < len(entities):
                raise ValueError(f"relation {i} {side} {index} points at a missing entity ({len(entities)} entities)")
        if head == tail:
            raise ValueError(f"relation {i} links entity {head} to itself")
        relations.append(Relation(head, tail, kind))
    sid = fields.get("id", fields.get("orig_id", default_id))
    return Sentence(str(sid), tuple(tokens), tuple(entities), tuple(relations))


@dataclass
class AdeReport:
    files: list[str]
    sentences: int = 0
    entities: int = 0
    relations: int = 0
    bad_rows: int = 0
    bad_examples: list[str] = field(default_factory=list)
    entity_types: dict[str, int] = field(default_factory=dict)
    relation_types: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        text = (f"{self.sentences} sentences, {self.entities} entities {self.entity_types}, "
                f"{self.relations} relations {self.relation_types}, {self.bad_rows} bad rows skipped")
        if self.bad_examples:
            text += "; first bad rows: " + "; ".join(self.bad_examples[:5])
        return text

    def metrics(self) -> dict[str, float]:
        return {"data/sentences": self.sentences, "data/entities": self.entities,
                "data/relations": self.relations, "data/bad_rows": self.bad_rows}


def _read_json_array(path: str) -> Iterator[Record | BadRow]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        try:
            items = json.load(handle)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    for number, item in enumerate(items, start=1):  # "line" is the element's 1-based position
        yield Record(path, number, item) if isinstance(item, dict) else BadRow(path, number, "expected a JSON object")


def _is_json_array(path: str) -> bool:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        head = handle.read(64).lstrip()
    return head.startswith("[")


def read_ade(
    paths: Sequence[str] | str,
    on_bad_row: Literal["skip", "fail"] = "skip",
    limit: Optional[int] = None,
) -> tuple[list[Sentence], AdeReport]:
    """Read ADE-format JSONL (or SpERT JSON arrays); bad sentences are skipped and counted, or fail."""
    files = expand_paths([paths] if isinstance(paths, str) else list(paths))
    report = AdeReport(files=files)
    sentences: list[Sentence] = []
    entity_types: Counter[str] = Counter()
    relation_types: Counter[str] = Counter()
    for path in files:
        rows: Iterable[Record | BadRow] = _read_json_array(path) if _is_json_array(path) else read_rows(path, "jsonl")
        for row in rows:
            if limit is not None and len(sentences) >= limit:
                break
            if isinstance(row, Record):
                try:
                    sentence = parse_sentence(row.fields, default_id=f"{Path(path).name}:{row.line}")
                except ValueError as exc:
                    row = BadRow(row.path, row.line, str(exc))
                else:
                    sentences.append(sentence)
                    entity_types.update(e.type for e in sentence.entities)
                    relation_types.update(r.type for r in sentence.relations)
                    continue
            if on_bad_row == "fail":
                raise DataError(str(row))
            report.bad_rows += 1
            if len(report.bad_examples) < 20:
                report.bad_examples.append(str(row))
    if not sentences:
        raise DataError(f"no valid sentences in {', '.join(files)} ({report.bad_rows} bad rows)")
    report.sentences = len(sentences)
    report.entities = sum(entity_types.values())
    report.relations = sum(relation_types.values())
    report.entity_types, report.relation_types = dict(entity_types), dict(relation_types)
    return sentences, report


def read_folds(path: str | Path) -> dict[str, dict[str, list[str]]]:
    """`{"split_k": {"train": [ids], "test": [ids]}}` with ids as strings, in file order."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read folds file {path}: {exc}") from exc
    folds = {}
    for name, split in raw.items():
        if not isinstance(split, dict) or "train" not in split or "test" not in split:
            raise DataError(f"{path}: fold {name!r} needs 'train' and 'test' id lists")
        folds[name] = {"train": [str(i) for i in split["train"]], "test": [str(i) for i in split["test"]]}
    return folds


def fold_name(folds: dict[str, Any], fold: int | str) -> str:
    name = fold if isinstance(fold, str) and fold in folds else f"split_{fold}"
    if name not in folds:
        raise DataError(f"fold {fold!r} not in folds file; available: {', '.join(sorted(folds))}")
    return name


def split_fold(sentences: Sequence[Sentence], folds: dict[str, dict[str, list[str]]],
               fold: int | str) -> tuple[list[Sentence], list[Sentence]]:
    """(train, test) sentences of one fold; ids the data lacks are ignored (e.g. under a read limit)."""
    split = folds[fold_name(folds, fold)]
    by_id = {s.id: s for s in sentences}
    train = [by_id[i] for i in split["train"] if i in by_id]
    test = [by_id[i] for i in split["test"] if i in by_id]
    return train, test


def bio_tags(sentence: Sentence) -> list[str]:
    """Word-level BIO tags; where entities overlap, the first one listed wins (ADE has 120 such pairs)."""
    tags = [OUTSIDE] * len(sentence.tokens)
    for entity in sentence.entities:
        if any(tags[i] != OUTSIDE for i in range(entity.start, entity.end)):
            continue
        tags[entity.start] = f"B-{entity.type}"
        for i in range(entity.start + 1, entity.end):
            tags[i] = f"I-{entity.type}"
    return tags


def decode_bio(tags: Sequence[str]) -> list[Entity]:
    """Spans from BIO tags; an I- that does not continue an entity of its type starts a new one."""
    spans: list[Entity] = []
    start: Optional[int] = None
    kind = ""
    for i, tag in enumerate(list(tags) + [OUTSIDE]):
        prefix, _, tag_type = tag.partition("-")
        continues = prefix == "I" and start is not None and tag_type == kind
        if start is not None and not continues:
            spans.append(Entity(start, i, kind))
            start = None
        if prefix in ("B", "I") and not continues:
            start, kind = i, tag_type
    return spans


def entity_words(entity: Entity, pooling: EntityPooling) -> list[int]:
    """The words that represent an entity: its last word (the paper's choice) or all of them."""
    return [entity.end - 1] if pooling == "last" else list(range(entity.start, entity.end))


@dataclass
class Alignment:
    """Tokenised sentences and, per sentence, the sub-word positions of each word (empty if truncated)."""

    input_ids: Any
    attention_mask: Any
    word_positions: list[list[list[int]]]
    seq_len: int


def align_words(tokenizer: Any, sentences: Sequence[Sequence[str]], max_length: int) -> Alignment:
    features = tokenizer(
        [list(s) for s in sentences],
        is_split_into_words=True,
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    positions: list[list[list[int]]] = []
    for b, words in enumerate(sentences):
        per_word: list[list[int]] = [[] for _ in words]
        for pos, word in enumerate(features.word_ids(b)):
            if word is not None:
                per_word[word].append(pos)
        positions.append(per_word)
    return Alignment(features["input_ids"], features["attention_mask"], positions, int(features["input_ids"].shape[1]))


def word_weights(positions: Sequence[int], pooling: WordPooling) -> dict[int, float]:
    """Sub-word weights that make a word vector: its first sub-word, or the mean of its sub-words."""
    if not positions:
        return {}
    if pooling == "first":
        return {positions[0]: 1.0}
    return {p: 1.0 / len(positions) for p in positions}


def words_weights(word_positions: Sequence[Sequence[int]], words: Sequence[int], pooling: WordPooling) -> dict[int, float]:
    """Mean over words of their word vectors; {} when any word was truncated away."""
    weights: dict[int, float] = {}
    for w in words:
        one = word_weights(word_positions[w], pooling)
        if not one:
            return {}
        for pos, value in one.items():
            weights[pos] = weights.get(pos, 0.0) + value / len(words)
    return weights
