"""Duplicate groups: items linked through any chain of duplicate pairs are one group (union-find).

Relevance in retrieval evaluation is a group, not a pair: when A duplicates B and B duplicates C,
C is a correct answer for A although no row says so. Both the retrieval task's reader and the
corpus-level validation set build their groups here.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Generic, Hashable, Sequence, TypeVar

if TYPE_CHECKING:
    from lmplatform.data.pairs import Pair

T = TypeVar("T", bound=Hashable)


class DuplicateGroups(Generic[T]):
    """Union-find with path halving over the items seen by `link` (or `find`)."""

    def __init__(self) -> None:
        self.parent: dict[T, T] = {}

    def __contains__(self, item: object) -> bool:
        return item in self.parent

    def find(self, item: T) -> T:
        """The representative of `item`'s group; an item not seen yet starts a group of its own."""
        self.parent.setdefault(item, item)
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def link(self, a: T, b: T) -> None:
        """Put `a` and `b` (and everything already grouped with either) in one group."""
        self.parent[self.find(a)] = self.find(b)

    def members(self) -> dict[T, set[T]]:
        """Every item seen -> the items of its group (itself included); items of one group share one set."""
        by_root: dict[T, set[T]] = defaultdict(set)
        for item in list(self.parent):
            by_root[self.find(item)].add(item)
        return {item: by_root[self.find(item)] for item in self.parent}


def pair_group_ids(pairs: Sequence["Pair"]) -> list[Hashable]:
    """Each pair's duplicate group: its `group` id when every pair names one (`data.group_field`), otherwise
    the group of its texts linked through all `pairs` (query and document of a pair are one group, and so
    is every pair sharing a text with it)."""
    if pairs and all(pair.group is not None for pair in pairs):
        return [("named", pair.group) for pair in pairs]
    links: DuplicateGroups[str] = DuplicateGroups()
    for pair in pairs:
        links.link(pair.query, pair.document)
    return [("linked", links.find(pair.query)) for pair in pairs]


def group_texts(pairs: Sequence["Pair"]) -> list[frozenset[str]]:
    """Per pair, every text of its duplicate group (its own query and document included)."""
    ids = pair_group_ids(pairs)
    texts: dict[Hashable, set[str]] = defaultdict(set)
    for pair, group in zip(pairs, ids):
        texts[group].update((pair.query, pair.document))
    frozen = {group: frozenset(members) for group, members in texts.items()}
    return [frozen[group] for group in ids]
