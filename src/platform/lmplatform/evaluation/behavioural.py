"""CheckList-style behavioural tests of classifiers and encoders, from YAML suites.

Four test types (`type:` in each test):

- `mft` (minimum functionality): labelled examples the classifier must get right.
- `invariance`: groups of texts that must all get the same predicted label. Groups come
  from `pairs` ([original, perturbed]), from `templates` (a text with `{slot}`s and
  `fill: {slot: [values...]}`; every filling is one group member) or from
  `texts` + `swaps` ([[from, to], ...] whole-word substitutions applied to each text).
- `directional`: for each [original, perturbed] pair, the probability of `label` must
  not move in the stated direction (`not_increase` / `not_decrease`) by more than
  `tolerance`.
- `embedding`: triples {anchor, positive, negative} with cos(anchor, positive) >
  cos(anchor, negative) + `margin`, on the encoder's normalised embeddings.

A test may name its `capability` (negation, typos, ...): several tests can probe one capability
with different constructions, and the summary adds their cases up per capability, which is the
number a reader of the report wants ("how often does this model miss negation?").

A classifier is anything with `labels` and `predict_proba(texts)` (`TextClassifier`,
`KNNClassifier`); an encoder anything with `encode(texts, normalize=True)`. Tests whose
model is not given are reported as skipped, not passed.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Protocol, Sequence, Union

import numpy as np
from pydantic import Field, TypeAdapter, ValidationError, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import ConfigError, read_yaml
from lmplatform.markdown import markdown_table

MAX_FAILING_EXAMPLES = 10


class SuiteError(ValueError):
    """A suite file that cannot be run; the message names the test and the field."""


class Classifier(Protocol):
    labels: list[str]

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray: ...


class _Test(Section):
    name: str = Field(..., min_length=1)
    description: str = ""
    capability: str = Field("", description="What the test probes; tests that share it are summed in the summary.")


class LabelledExample(Section):
    text: str = Field(..., min_length=1)
    label: str = Field(..., min_length=1)


class MFTTest(_Test):
    type: Literal["mft"]
    examples: list[LabelledExample] = Field(..., min_length=1)


class Template(Section):
    text: str = Field(..., min_length=1)
    fill: dict[str, list[str]] = Field(..., min_length=1)

    @model_validator(mode="after")
    def _slots_match(self) -> "Template":
        slots = set(re.findall(r"\{(\w+)\}", self.text))
        if slots != set(self.fill):
            raise ValueError(f"template slots {sorted(slots)} do not match fill keys {sorted(self.fill)}")
        if any(len(values) < 1 for values in self.fill.values()):
            raise ValueError("every fill slot needs at least one value")
        return self

    def expand(self) -> list[str]:
        keys = sorted(self.fill)
        return [self.text.format(**dict(zip(keys, combo))) for combo in itertools.product(*(self.fill[k] for k in keys))]


class InvarianceTest(_Test):
    type: Literal["invariance"]
    pairs: list[tuple[str, str]] = Field(default_factory=list)
    templates: list[Template] = Field(default_factory=list)
    texts: list[str] = Field(default_factory=list)
    swaps: list[tuple[str, str]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_cases(self) -> "InvarianceTest":
        if bool(self.texts) != bool(self.swaps):
            raise ValueError("'texts' and 'swaps' go together")
        if not (self.pairs or self.templates or self.texts):
            raise ValueError("give at least one of 'pairs', 'templates' or 'texts' + 'swaps'")
        return self

    def groups(self) -> list[list[str]]:
        groups = [list(pair) for pair in self.pairs] + [t.expand() for t in self.templates]
        for text in self.texts:
            variants = [text]
            for old, new in self.swaps:
                pattern = re.compile(rf"\b{re.escape(old)}\b", flags=re.IGNORECASE)
                if pattern.search(text):
                    variants.append(pattern.sub(new, text))
            if len(variants) > 1:
                groups.append(variants)
        return groups


class DirectionalTest(_Test):
    type: Literal["directional"]
    label: str = Field(..., min_length=1, description="The class whose probability is tracked.")
    direction: Literal["not_increase", "not_decrease"]
    tolerance: float = Field(0.0, ge=0.0, le=1.0)
    pairs: list[tuple[str, str]] = Field(..., min_length=1)


class Triple(Section):
    anchor: str = Field(..., min_length=1)
    positive: str = Field(..., min_length=1)
    negative: str = Field(..., min_length=1)


class EmbeddingTest(_Test):
    type: Literal["embedding"]
    margin: float = 0.0
    triples: list[Triple] = Field(..., min_length=1)


BehaviouralTest = Annotated[Union[MFTTest, InvarianceTest, DirectionalTest, EmbeddingTest], Field(discriminator="type")]
_TEST_ADAPTER: TypeAdapter = TypeAdapter(BehaviouralTest)
TEST_TYPES = ("mft", "invariance", "directional", "embedding")




def parse_suite(data: Any, source: str = "<suite>") -> tuple[str, list[Any]]:
    """Validate a suite mapping; errors name the file, the test (by name and position) and the field."""
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list) or not data["tests"]:
        raise SuiteError(f"{source}: a suite is a mapping with 'name' and a non-empty list 'tests'")
    extra = set(data) - {"name", "description", "tests"}
    if extra:
        raise SuiteError(f"{source}: unknown top-level key(s) {sorted(extra)}; allowed: name, description, tests")
    tests, seen = [], set()
    for position, raw in enumerate(data["tests"], start=1):
        label = f"test #{position}"
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            label = f"test {raw['name']!r} (#{position})"
        if not isinstance(raw, dict):
            raise SuiteError(f"{source}: {label}: must be a mapping, got {type(raw).__name__}")
        if raw.get("type") not in TEST_TYPES:
            raise SuiteError(f"{source}: {label}: field 'type' is {raw.get('type')!r}; allowed: {', '.join(TEST_TYPES)}")
        try:
            test = _TEST_ADAPTER.validate_python(raw)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"][1:]) or "(test)"  # loc[0] is the union tag
                problems.append(f"field '{where}': {error['msg']}")
            raise SuiteError(f"{source}: {label}: " + "; ".join(problems)) from None
        if test.name in seen:
            raise SuiteError(f"{source}: {label}: duplicate test name")
        seen.add(test.name)
        tests.append(test)
    return str(data.get("name") or Path(source).stem), tests


def load_suite(path: str | Path) -> tuple[str, list[Any]]:
    try:
        data = read_yaml(path)
    except ConfigError as exc:
        raise SuiteError(str(exc).replace("config file", "suite file")) from None
    return parse_suite(data, str(path))


# -- running -----------------------------------------------------------------

def _result(test: Any, cases: int, failing: list[dict[str, Any]], skipped: Optional[str] = None) -> dict[str, Any]:
    return {
        "name": test.name,
        "type": test.type,
        "capability": test.capability,
        "cases": cases,
        "failures": len(failing),
        "failure_rate": (len(failing) / cases) if cases and not skipped else None,
        "failing_examples": failing[:MAX_FAILING_EXAMPLES],
        "skipped": skipped,
    }


def _predict(classifier: Classifier, texts: list[str]) -> tuple[np.ndarray, list[str]]:
    proba = np.asarray(classifier.predict_proba(texts))
    return proba, [classifier.labels[i] for i in proba.argmax(axis=1)]


def run_test(test: Any, classifier: Optional[Classifier] = None, encoder: Any = None) -> dict[str, Any]:
    if test.type == "embedding":
        if encoder is None:
            return _result(test, len(test.triples), [], skipped="no encoder given")
        return _run_embedding(test, encoder)
    if classifier is None:
        return _result(test, 0, [], skipped="no classifier given")
    if test.type == "mft":
        return _run_mft(test, classifier)
    if test.type == "invariance":
        return _run_invariance(test, classifier)
    return _run_directional(test, classifier)


def _run_mft(test: MFTTest, classifier: Classifier) -> dict[str, Any]:
    unknown = sorted({ex.label for ex in test.examples} - set(classifier.labels))
    if unknown:
        raise SuiteError(f"test {test.name!r}: field 'examples.label': {unknown} "
                         f"not among the classifier's labels {classifier.labels}")
    proba, predicted = _predict(classifier, [ex.text for ex in test.examples])
    failing = [{"text": ex.text, "expected": ex.label, "predicted": p, "confidence": float(row.max())}
               for ex, p, row in zip(test.examples, predicted, proba) if p != ex.label]
    return _result(test, len(test.examples), failing)


def _run_invariance(test: InvarianceTest, classifier: Classifier) -> dict[str, Any]:
    groups = test.groups()
    flat = [text for group in groups for text in group]
    _, predicted = _predict(classifier, flat)
    failing, offset = [], 0
    for group in groups:
        labels = predicted[offset : offset + len(group)]
        offset += len(group)
        if len(set(labels)) > 1:
            failing.append({"texts": group, "predicted": labels})
    return _result(test, len(groups), failing)


def _run_directional(test: DirectionalTest, classifier: Classifier) -> dict[str, Any]:
    if test.label not in classifier.labels:
        raise SuiteError(f"test {test.name!r}: field 'label': {test.label!r} "
                         f"not among the classifier's labels {classifier.labels}")
    column = classifier.labels.index(test.label)
    proba, _ = _predict(classifier, [text for pair in test.pairs for text in pair])
    before, after = proba[0::2, column], proba[1::2, column]
    change = after - before
    bad = change > test.tolerance if test.direction == "not_increase" else change < -test.tolerance
    failing = [{"original": o, "perturbed": p, f"p({test.label}) before": float(b), f"p({test.label}) after": float(a)}
               for (o, p), b, a, wrong in zip(test.pairs, before, after, bad) if wrong]
    return _result(test, len(test.pairs), failing)


def _run_embedding(test: EmbeddingTest, encoder: Any) -> dict[str, Any]:
    texts = [t for triple in test.triples for t in (triple.anchor, triple.positive, triple.negative)]
    vectors = np.asarray(encoder.encode(texts, normalize=True))
    anchor, positive, negative = vectors[0::3], vectors[1::3], vectors[2::3]
    cos_pos, cos_neg = np.sum(anchor * positive, 1), np.sum(anchor * negative, 1)
    failing = [{"anchor": t.anchor, "positive": t.positive, "negative": t.negative,
                "cos_positive": float(cp), "cos_negative": float(cn)}
               for t, cp, cn in zip(test.triples, cos_pos, cos_neg) if not cp > cn + test.margin]
    return _result(test, len(test.triples), failing)


def run_suite(suite: str | Path | tuple[str, list[Any]], classifier: Optional[Classifier] = None,
              encoder: Any = None) -> dict[str, Any]:
    """Run every test; returns {"suite", "tests": [per-test results], "summary"}."""
    name, tests = load_suite(suite) if isinstance(suite, (str, Path)) else suite
    if classifier is None and encoder is None:
        raise SuiteError("run_suite needs a classifier, an encoder, or both")
    results = [run_test(test, classifier, encoder) for test in tests]
    ran = [r for r in results if not r["skipped"]]
    return {
        "suite": name,
        "tests": results,
        "summary": {
            "tests": len(results),
            "skipped": len(results) - len(ran),
            "tests_failing": sum(1 for r in ran if r["failures"]),
            "cases": sum(r["cases"] for r in ran),
            "failures": sum(r["failures"] for r in ran),
            "capabilities": _by_capability(ran),
        },
    }


def _by_capability(ran: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Cases and failures summed over the tests that declare each capability (skipped tests are left out)."""
    totals: dict[str, dict[str, Any]] = {}
    for r in ran:
        if r["capability"]:
            total = totals.setdefault(r["capability"], {"tests": 0, "cases": 0, "failures": 0})
            total["tests"] += 1
            total["cases"] += r["cases"]
            total["failures"] += r["failures"]
    for total in totals.values():
        total["failure_rate"] = total["failures"] / total["cases"] if total["cases"] else None
    return totals


def report_markdown(report: dict[str, Any]) -> str:
    rows = [[str(r["name"]), str(r["type"]), str(r["cases"]), str(r["failures"]),
             "skipped: " + r["skipped"] if r["skipped"] else f"{100 * r['failure_rate']:.1f}%"] for r in report["tests"]]
    lines = [f"## Behavioural suite `{report['suite']}`", "",
             markdown_table(["test", "type", "cases", "failures", "failure rate"], rows)]
    capabilities = report["summary"].get("capabilities") or {}
    if capabilities:
        rows = [[name, str(c["tests"]), str(c["cases"]), str(c["failures"]),
                 "-" if c["failure_rate"] is None else f"{100 * c['failure_rate']:.1f}%"] for name, c in capabilities.items()]
        lines += ["", "### By capability", "", markdown_table(["capability", "tests", "cases", "failures", "failure rate"], rows)]
    for r in report["tests"]:
        if r["failing_examples"]:
            lines += ["", f"### Failing examples of `{r['name']}`", ""]
            lines += [f"- `{json.dumps(example, ensure_ascii=False)}`" for example in r["failing_examples"]]
    return "\n".join(lines) + "\n"
