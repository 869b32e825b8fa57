"""Hard-negative selection: never the query's group, only the rank window, outside the relative margin,
and a cross-encoder's likely duplicates dropped (a deterministic scorer, then a real tiny cross-encoder)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from lmplatform.retrieval.mining import MiningRules, select_negatives


def _ranked(n: int, top: float = 0.9, step: float = 0.01) -> list[tuple[str, float]]:
    return [(f"c{i}", top - step * i) for i in range(n)]


def test_group_members_are_never_negatives_and_do_not_take_a_rank() -> None:
    rng = random.Random(0)
    for _ in range(50):
        ranked = _ranked(40)
        group = {f"c{i}" for i in rng.sample(range(40), rng.randint(0, 15))}
        rules = MiningRules(num_negatives=5, range_min=2, range_max=20, relative_margin=None)
        chosen = select_negatives(ranked, positive_score=0.95, excluded=group, rules=rules)
        assert not set(chosen.negatives) & group
        allowed = [text for text, _ in ranked if text not in group]
        assert chosen.negatives == allowed[2:7]  # ranks 2..6 among the candidates that are not the group's
        assert chosen.scores == sorted(chosen.scores, reverse=True)


def test_the_window_bounds_the_ranks() -> None:
    rules = MiningRules(num_negatives=3, range_min=3, range_max=6, relative_margin=None)
    chosen = select_negatives(_ranked(20) + [("positive", 0.1)], 0.95, {"query", "positive"}, rules)
    assert chosen.negatives == ["c3", "c4", "c5"]  # ranks 3, 4, 5: range_max is excluded, as in sentence-transformers
    assert chosen.outside_window == 3 and chosen.excluded == 0  # reading stopped at rank range_max


def test_candidates_within_the_relative_margin_of_the_positive_are_skipped() -> None:
    ranked = [("close", 0.79), ("below the margin", 0.75), ("far", 0.5)]
    rules = MiningRules(num_negatives=3, range_max=10, relative_margin=0.05)
    chosen = select_negatives(ranked, positive_score=0.8, excluded=set(), rules=rules)
    assert chosen.negatives == ["below the margin", "far"] and chosen.margin == 1  # threshold 0.8 - 0.04 = 0.76
    # a negative positive score: the threshold is positive - |positive| x margin, below it
    chosen = select_negatives([("a", -0.1), ("b", -0.3)], -0.2, set(), rules)
    assert chosen.negatives == ["b"]
    assert select_negatives(ranked, 0.8, set(), MiningRules(num_negatives=3, range_max=10, relative_margin=None)).negatives \
        == ["close", "below the margin", "far"]


def test_a_planted_false_negative_is_dropped_by_the_cross_encoder_filter() -> None:
    ranked = [("unrelated crash", 0.6), ("same bug, other words", 0.58), ("other problem", 0.4)]
    duplicates = {"same bug, other words"}
    rules = MiningRules(num_negatives=2, range_max=10, relative_margin=None, max_cross_encoder_score=0.5)

    def scorer(texts: list[str]) -> list[float]:  # a deterministic stand-in for a cross-encoder
        return [0.95 if text in duplicates else 0.1 for text in texts]

    assert select_negatives(ranked, 0.7, set(), rules).negatives == ["unrelated crash", "same bug, other words"]
    chosen = select_negatives(ranked, 0.7, set(), rules, score_pairs=scorer)
    assert chosen.negatives == ["unrelated crash", "other problem"] and chosen.cross_encoder == 1


def test_a_real_cross_encoder_drops_what_it_scores_above_the_ceiling(tiny_bert: Path) -> None:
    import torch

    from lmplatform.pipeline.mine import cross_encoder_scorer

    torch.manual_seed(0)  # the tiny model's score head is new: the same one every run
    scorer = cross_encoder_scorer(str(tiny_bert), batch_size=4)("printer jams in tray two")
    texts = ["paper jam", "vpn tunnel down", "disk full on server", "login timeout", "invoice payment failed"]
    probabilities = list(scorer(texts))
    # The two highest are above it. Midway between the third and the second: the random head's scores lie within
    # about 1e-5 of each other, and a text batched with others of another length moves by about 1e-7.
    ceiling = float(sum(sorted(probabilities)[2:4]) / 2)
    rules = MiningRules(num_negatives=5, range_max=10, relative_margin=None, max_cross_encoder_score=ceiling)
    chosen = select_negatives([(t, 0.5) for t in texts], 0.9, set(), rules, score_pairs=scorer)
    assert chosen.cross_encoder == 2
    assert chosen.negatives == [t for t, p in zip(texts, probabilities) if p <= ceiling]


def test_rules_that_cannot_hold_the_negatives_are_refused() -> None:
    with pytest.raises(ValueError, match="range_min < range_max"):
        MiningRules(range_min=5, range_max=5)
    with pytest.raises(ValueError, match="num_negatives=4 must be between 1 and range_max - range_min"):
        MiningRules(num_negatives=4, range_min=0, range_max=3)
