"""Strict and boundary-free scoring of entities and relations (macro-F1 over types).

Strict: an entity is correct when its boundaries and type match a gold entity; a relation is correct
when its type and both arguments (boundaries and types) are correct. "RE-" drops the boundaries: a
predicted relation matches an unmatched gold relation of the same type whose arguments each share at
least one word with the predicted arguments.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from lmplatform.graph.data import Entity

# (sentence id, start, end, type)
EntityKey = tuple[str, int, int, str]
# (sentence id, head entity, tail entity, relation type)
RelationKey = tuple[str, Entity, Entity, str]


@dataclass(frozen=True)
class Scores:
    precision: float
    recall: float
    f1: float
    support: int

    def as_dict(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1, "support": float(self.support)}


def prf(true_positive: int, predicted: int, gold: int) -> Scores:
    precision = true_positive / predicted if predicted else 0.0
    recall = true_positive / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision, recall, f1, gold)


def _macro(per_type: dict[str, Scores]) -> dict[str, float]:
    if not per_type:
        return {"macro_f1": 0.0, "macro_precision": 0.0, "macro_recall": 0.0}
    n = len(per_type)
    return {
        "macro_f1": sum(s.f1 for s in per_type.values()) / n,
        "macro_precision": sum(s.precision for s in per_type.values()) / n,
        "macro_recall": sum(s.recall for s in per_type.values()) / n,
    }


def strict_scores(gold: Iterable[tuple], predicted: Iterable[tuple]) -> dict[str, float | dict[str, Scores]]:
    """Exact-match scores per type (the last tuple element) and their macro average."""
    gold_set, pred_set = set(gold), set(predicted)
    types = sorted({item[-1] for item in gold_set | pred_set})
    per_type = {
        t: prf(len({g for g in gold_set if g[-1] == t} & {p for p in pred_set if p[-1] == t}),
               sum(1 for p in pred_set if p[-1] == t), sum(1 for g in gold_set if g[-1] == t))
        for t in types
    }
    return {**_macro(per_type), "per_type": per_type}


def _overlap(a: Entity, b: Entity) -> bool:
    return a.start < b.end and b.start < a.end


def boundary_free_relation_scores(gold: Sequence[RelationKey],
                                  predicted: Sequence[RelationKey]) -> dict[str, float | dict[str, Scores]]:
    """RE-: arguments match by word overlap (types of the arguments and boundaries ignored)."""
    gold_by_sentence: dict[str, list[RelationKey]] = defaultdict(list)
    for relation in set(gold):
        gold_by_sentence[relation[0]].append(relation)
    types = sorted({r[-1] for r in set(gold) | set(predicted)})
    hits = dict.fromkeys(types, 0)
    used: set[RelationKey] = set()
    for sid, head, tail, kind in sorted(set(predicted), key=lambda r: (r[0], r[1].start, r[2].start)):
        for candidate in gold_by_sentence.get(sid, []):
            if candidate in used or candidate[3] != kind:
                continue
            if _overlap(candidate[1], head) and _overlap(candidate[2], tail):
                used.add(candidate)
                hits[kind] += 1
                break
    per_type = {
        t: prf(hits[t], sum(1 for r in set(predicted) if r[-1] == t), sum(1 for r in set(gold) if r[-1] == t))
        for t in types
    }
    return {**_macro(per_type), "per_type": per_type}
