"""The behavioural runner with hand-built models whose passes and failures are known in advance."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from lmplatform.evaluation.behavioural import SuiteError, load_suite, parse_suite, report_markdown, run_suite

REPO = Path(__file__).resolve().parents[2]


class KeywordClassifier:
    """p(class) from keyword counts; it ignores pronouns but is fooled by the word 'crash'."""

    labels = ["database", "network", "ui"]
    KEYWORDS = {"database": ["postgres", "query", "crash"], "network": ["vpn", "dns"], "ui": ["button", "screen"]}

    def predict_proba(self, texts):
        rows = []
        for text in texts:
            words = text.lower().split()
            counts = np.array([sum(w in words for w in self.KEYWORDS[c]) for c in self.labels], dtype=float) + 0.1
            rows.append(counts / counts.sum())
        return np.array(rows)


class BagOfWordsEncoder:
    def encode(self, texts, normalize=True):
        vocab = sorted({w for t in texts for w in t.lower().split()})
        vectors = np.array([[t.lower().split().count(w) for w in vocab] for t in texts], dtype=float)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


SUITE = {
    "name": "crafted",
    "tests": [
        {"name": "mft", "type": "mft", "examples": [
            {"text": "postgres query slow", "label": "database"},
            {"text": "vpn down", "label": "network"},
            {"text": "screen crash", "label": "ui"},  # 'crash' is a database keyword: a tie -> database, fails
        ]},
        {"name": "inv_pronoun", "type": "invariance", "templates": [
            {"text": "{p} cannot reach the vpn", "fill": {"p": ["he", "she", "they"]}}]},
        {"name": "inv_swap", "type": "invariance", "texts": ["the button froze", "the vpn froze"],
         "swaps": [["froze", "crash"]]},  # 'button crash' ties with database: flips; 'vpn crash' too
        {"name": "dir", "type": "directional", "label": "network", "direction": "not_decrease", "tolerance": 0.01,
         "pairs": [["vpn down", "vpn and dns down"], ["vpn down", "vpn down postgres"]]},
        {"name": "emb", "type": "embedding", "triples": [
            {"anchor": "vpn tunnel down", "positive": "vpn tunnel is down", "negative": "postgres query slow"},
            {"anchor": "vpn tunnel down", "positive": "the network fails", "negative": "vpn tunnel up"}]},
    ],
}


def test_crafted_models_pass_and_fail_as_expected() -> None:
    report = run_suite(parse_suite(SUITE), classifier=KeywordClassifier(), encoder=BagOfWordsEncoder())
    results = {r["name"]: r for r in report["tests"]}
    assert results["mft"]["failures"] == 1 and results["mft"]["failure_rate"] == pytest.approx(1 / 3)
    assert results["mft"]["failing_examples"][0]["text"] == "screen crash"
    assert results["inv_pronoun"]["failures"] == 0 and results["inv_pronoun"]["cases"] == 1
    assert results["inv_swap"]["cases"] == 2 and results["inv_swap"]["failures"] == 2
    assert results["dir"]["failures"] == 1 and results["dir"]["failing_examples"][0]["perturbed"] == "vpn down postgres"
    assert results["emb"]["failures"] == 1 and results["emb"]["failing_examples"][0]["positive"] == "the network fails"
    assert report["summary"] == {"tests": 5, "skipped": 0, "tests_failing": 4, "cases": 10, "failures": 5, "capabilities": {}}
    markdown = report_markdown(report)
    assert "| mft | mft | 3 | 1 | 33.3% |" in markdown and "screen crash" in markdown


def test_missing_model_skips_instead_of_passing() -> None:
    report = run_suite(parse_suite(SUITE), encoder=BagOfWordsEncoder())
    skipped = {r["name"]: r["skipped"] for r in report["tests"]}
    assert skipped["mft"] == "no classifier given" and skipped["emb"] is None
    assert report["summary"]["skipped"] == 4


@pytest.mark.parametrize(
    ("test", "message"),
    [
        ({"name": "m", "type": "mft", "examples": [{"text": "x"}]}, r"test 'm' \(#1\): field 'examples.0.label': Field required"),
        ({"name": "d", "type": "directional", "label": "ui", "direction": "up", "pairs": [["a", "b"]]},
         r"test 'd' \(#1\): field 'direction'"),
        ({"name": "t", "type": "invariance", "templates": [{"text": "{a} x", "fill": {"b": ["1"]}}]},
         r"test 't' \(#1\): field 'templates.0': .*slots \['a'\] do not match fill keys \['b'\]"),
        ({"name": "q", "type": "quiz"}, r"test 'q' \(#1\): field 'type' is 'quiz'; allowed: mft, invariance"),
        ({"name": "i", "type": "invariance"}, r"test 'i' \(#1\).*at least one of 'pairs'"),
    ],
)
def test_bad_suite_names_test_and_field(test, message, tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "tests": [test]}))
    with pytest.raises(SuiteError, match=message):
        load_suite(path)


def test_labels_unknown_to_the_model_are_an_error() -> None:
    suite = parse_suite({"name": "s", "tests": [{"name": "m", "type": "mft", "examples": [{"text": "x", "label": "payments"}]}]})
    with pytest.raises(SuiteError, match=r"test 'm': field 'examples.label': \['payments'\] not among"):
        run_suite(suite, classifier=KeywordClassifier())


def test_starter_suite_is_valid() -> None:
    name, tests = load_suite(REPO / "configs" / "behavioural" / "starter.yaml")
    assert name == "trouble-reports-starter"
    assert {t.type for t in tests} == {"mft", "invariance", "directional", "embedding"}


def test_capability_sums_its_tests_and_leaves_skipped_ones_out() -> None:
    tests = [dict(test, capability="vpn") for test in SUITE["tests"] if test["name"] in ("inv_pronoun", "emb")]
    # emb2's anchor and positive share no word: 0 > 0 fails
    tests.append({"name": "emb2", "type": "embedding", "capability": "vpn", "triples": [
        {"anchor": "vpn tunnel down", "positive": "the network fails", "negative": "postgres query slow"}]})
    report = run_suite(parse_suite({"name": "caps", "tests": tests}), encoder=BagOfWordsEncoder())
    # inv_pronoun is skipped (no classifier): its case must not count towards "vpn"
    assert report["summary"]["capabilities"] == {
        "vpn": {"tests": 2, "cases": 3, "failures": 2, "failure_rate": pytest.approx(2 / 3)}}
    assert "| vpn | 2 | 3 | 2 | 66.7% |" in report_markdown(report)
