"""Hard negative relation graphs: swap one argument of each relation for a random non-entity word.

For a (head, tail) relation the sampler replaces one side (chosen at random) with a random word of the
same sentence that (a) does not belong to an entity of the kept side's type, so a drug never replaces
the adverse effect and vice versa ("a random token that is not part of an adverse effect", and the
converse), and (b) is not inside the replaced argument or any other entity that is related to the
kept argument, so the corrupted pair is never a gold relation. A negative graph has exactly as many
relations as the positive one. When a sentence has no admissible word for either side, the relation
is kept in the negative graph unchanged but flagged, and the loss ignores that negative.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from lmplatform.graph.data import Entity, Sentence


@dataclass(frozen=True)
class Argument:
    """A relation argument: a gold entity (entity index) or a single replacement word (word index)."""

    entity: Optional[int] = None
    word: Optional[int] = None

    def words(self, sentence: Sentence) -> tuple[int, int]:
        """(start, end) word span."""
        if self.entity is not None:
            e = sentence.entities[self.entity]
            return e.start, e.end
        assert self.word is not None
        return self.word, self.word + 1


@dataclass(frozen=True)
class NegativeRelation:
    head: Argument
    tail: Argument
    valid: bool  # False when no admissible replacement existed


def candidate_words(sentence: Sentence, keep: int, replace: int) -> list[int]:
    """Words that may replace entity `replace` in a relation with entity `keep`."""
    kept: Entity = sentence.entities[keep]
    banned: set[int] = set()
    for entity in sentence.entities:
        if entity.type == kept.type:
            banned.update(range(entity.start, entity.end))
    related = {replace} | {r.tail if r.head == keep else r.head for r in sentence.relations if keep in (r.head, r.tail)}
    for index in related:
        e = sentence.entities[index]
        banned.update(range(e.start, e.end))
    return [w for w in range(len(sentence.tokens)) if w not in banned]


def sample_negative_graph(sentence: Sentence, rng: random.Random) -> list[NegativeRelation]:
    """One hard-negative graph: every relation of the sentence with one side replaced."""
    graph = []
    for relation in sentence.relations:
        sides = [("tail", relation.head, relation.tail), ("head", relation.tail, relation.head)]
        rng.shuffle(sides)
        negative = None
        for side, keep, replace in sides:
            words = candidate_words(sentence, keep, replace)
            if words:
                word = Argument(word=rng.choice(words))
                kept = Argument(entity=keep)
                negative = NegativeRelation(kept, word, True) if side == "tail" else NegativeRelation(word, kept, True)
                break
        if negative is None:
            negative = NegativeRelation(Argument(entity=relation.head), Argument(entity=relation.tail), False)
        graph.append(negative)
    return graph


def sample_negative_graphs(sentence: Sentence, count: int, rng: random.Random) -> list[list[NegativeRelation]]:
    return [sample_negative_graph(sentence, rng) for _ in range(count)]
