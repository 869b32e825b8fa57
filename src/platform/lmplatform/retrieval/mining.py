"""Hard-negative selection for one (query, positive) pair, given the query's ranked candidates.

Pure: no model, no index. The mine stage (pipeline/mine.py) encodes and searches, then calls
`select_negatives` once per pair with the candidates best first and their bi-encoder scores.

The rules follow sentence-transformers' `mine_hard_negatives` where it has them:

- Candidates that are not negatives are never ranked: the pair's own query and positive, and every
  text of the query's duplicate group (a duplicate is a positive nobody paired). `rank` counts the
  remaining candidates from 0, best first.
- The window keeps ranks `range_min <= rank < range_max` (sentence-transformers slices its top
  `range_max` and drops the first `range_min`): skipping the very top avoids unlabelled positives.
- `relative_margin` m drops a candidate scoring above `positive - |positive| * m` (its formula): a
  negative must score at least m times the positive's magnitude below the positive. 0 keeps only
  candidates at or below the positive's score; None turns the rule off.
- With `score_pairs` (a cross-encoder bound to the query), the candidates left are scored again and
  those above `max_cross_encoder_score` (a relevance probability) are dropped as likely false
  negatives. sentence-transformers instead applies its margins to the cross-encoder's scores; a fixed
  ceiling on the probability is simpler to read and to set.
- The first `num_negatives` candidates left, best first, are the negatives ("top" sampling).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Optional, Sequence

# (candidate texts) -> one relevance score per text, for the pair's query (a cross-encoder's probability)
ScorePairs = Callable[[Sequence[str]], Sequence[float]]


@dataclass(frozen=True)
class MiningRules:
    """What `select_negatives` keeps; see the module docstring."""

    num_negatives: int = 3
    range_min: int = 0
    range_max: int = 50
    relative_margin: Optional[float] = 0.05
    max_cross_encoder_score: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.range_min < self.range_max:
            raise ValueError(f"need 0 <= range_min < range_max, got range_min={self.range_min}, range_max={self.range_max}")
        if not 1 <= self.num_negatives <= self.range_max - self.range_min:
            raise ValueError(f"num_negatives={self.num_negatives} must be between 1 and range_max - range_min "
                             f"({self.range_max - self.range_min})")
        if self.relative_margin is not None and not 0 <= self.relative_margin < 1:
            raise ValueError(f"relative_margin must be in [0, 1) or None, got {self.relative_margin}")


@dataclass
class Selection:
    """The chosen negatives (best first) with their bi-encoder scores, and why the other candidates were left."""

    negatives: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    excluded: int = 0  # the query, the positive or a text of the query's group, among the candidates searched
    outside_window: int = 0  # ranked above range_min (below range_max is never searched)
    margin: int = 0  # within the relative margin of the positive's score
    cross_encoder: int = 0  # scored above max_cross_encoder_score by the cross-encoder


def select_negatives(
    ranked: Sequence[tuple[str, float]],
    positive_score: float,
    excluded: Collection[str],
    rules: MiningRules,
    score_pairs: Optional[ScorePairs] = None,
) -> Selection:
    """Up to `rules.num_negatives` hard negatives from `ranked` ((text, score) best first) for one pair.

    `positive_score` is the bi-encoder's score of the pair's positive; `excluded` the texts that are
    never negatives for this pair (its query, its positive, the texts of the query's duplicate group).
    Candidates are read only to rank `range_max`.
    """
    selection = Selection()
    threshold = None
    if rules.relative_margin is not None:
        threshold = positive_score - abs(positive_score) * rules.relative_margin
    window: list[tuple[str, float]] = []
    rank = 0
    for text, score in ranked:
        if rank >= rules.range_max:
            break
        if text in excluded:
            selection.excluded += 1
            continue
        rank += 1
        if rank <= rules.range_min:
            selection.outside_window += 1
        elif threshold is not None and score > threshold:
            selection.margin += 1
        else:
            window.append((text, score))
    if score_pairs is not None and window:
        relevance = score_pairs([text for text, _ in window])
        kept = [candidate for candidate, p in zip(window, relevance) if p <= rules.max_cross_encoder_score]
        selection.cross_encoder = len(window) - len(kept)
        window = kept
    for text, score in window[: rules.num_negatives]:
        selection.negatives.append(text)
        selection.scores.append(float(score))
    return selection
