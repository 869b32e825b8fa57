"""The shipped bug-report suite stays a suite that can fail: valid, not trivial, and failed by a random encoder.

Its cases put the lexically closer text on the negative side (see the suite's header), so an encoder
that only matches tokens, random or bag-of-words, must fail most of them. If someone edits the
suite into cases that any model passes, these tests say so.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from lmplatform.evaluation.behavioural import load_suite, run_suite

SUITE = Path(__file__).resolve().parents[2] / "configs" / "behavioural" / "bug_reports.yaml"
CAPABILITIES = {"negation", "typos_abbreviations", "synonyms_paraphrase", "numbers_versions", "duplicates"}


class BagOfWordsEncoder:
    """Cosine of word counts: the pure surface-overlap model the suite is built to defeat."""

    def encode(self, texts, normalize=True):
        vocab = sorted({w for t in texts for w in t.lower().split()})
        vectors = np.array([[t.lower().split().count(w) for w in vocab] for t in texts], dtype=float)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_suite_is_valid_and_every_case_compares_three_different_texts() -> None:
    name, tests = load_suite(SUITE)
    assert name == "bug-reports"
    assert {t.type for t in tests} == {"embedding"}  # encoder-only: there is no bug-report classifier to test
    cases = Counter()
    for test in tests:
        assert test.capability in CAPABILITIES, test.name
        for triple in test.triples:
            # identical texts would make a case that every encoder passes (or fails) by construction
            assert len({triple.anchor, triple.positive, triple.negative}) == 3, triple
        cases[test.capability] += len(test.triples)
    assert set(cases) == CAPABILITIES and min(cases.values()) >= 10 and 55 <= sum(cases.values()) <= 70


def test_random_and_bag_of_words_encoders_fail_most_of_the_suite(tiny_bert: Path) -> None:
    from lmplatform.models.encoder import Encoder

    suite = load_suite(SUITE)
    for encoder, overall, per_capability in ((Encoder.from_pretrained(tiny_bert), 0.75, 0.5), (BagOfWordsEncoder(), 0.9, 0.75)):
        summary = run_suite(suite, encoder=encoder)["summary"]
        assert summary["skipped"] == 0
        assert summary["failures"] / summary["cases"] >= overall, (type(encoder).__name__, summary)
        rates = {name: c["failure_rate"] for name, c in summary["capabilities"].items()}
        assert set(rates) == CAPABILITIES and min(rates.values()) >= per_capability, (type(encoder).__name__, rates)
