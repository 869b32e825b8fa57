import pytest

from lmplatform.graph.data import Entity
from lmplatform.graph.metrics import boundary_free_relation_scores, strict_scores


def test_a_boundary_error_makes_an_entity_wrong_in_strict_scoring() -> None:
    gold = [("s", 0, 2, "Drug"), ("s", 3, 4, "AE"), ("t", 1, 2, "AE")]
    predicted = [("s", 0, 1, "Drug"), ("s", 3, 4, "AE"), ("t", 1, 2, "Drug")]  # boundary error, right, type error
    scores = strict_scores(gold, predicted)
    per_type = scores["per_type"]
    assert per_type["Drug"].precision == 0.0 and per_type["Drug"].recall == 0.0
    assert per_type["AE"].precision == 1.0 and per_type["AE"].recall == pytest.approx(0.5)
    assert per_type["AE"].f1 == pytest.approx(2 / 3)
    assert scores["macro_f1"] == pytest.approx((0.0 + 2 / 3) / 2)


def test_relation_needs_both_entities_exact_but_re_minus_forgives_boundaries() -> None:
    drug, short_drug, effect = Entity(0, 2, "Drug"), Entity(0, 1, "Drug"), Entity(3, 4, "AE")
    gold = [("s", effect, drug, "ADE")]
    assert strict_scores(gold, [("s", effect, short_drug, "ADE")])["macro_f1"] == 0.0
    assert strict_scores(gold, [("s", effect, drug, "ADE")])["macro_f1"] == 1.0
    assert boundary_free_relation_scores(gold, [("s", effect, short_drug, "ADE")])["macro_f1"] == 1.0
    # a non-overlapping argument is wrong even without boundaries; one gold relation matches once
    far = Entity(5, 6, "Drug")
    free = boundary_free_relation_scores(gold, [("s", effect, far, "ADE"), ("s", effect, short_drug, "ADE"),
                                                ("s", effect, drug, "ADE")])
    assert free["per_type"]["ADE"].precision == pytest.approx(1 / 3) and free["per_type"]["ADE"].recall == 1.0
