"""A failing batch is retried member by member, without Ray: only the member that raises gets an error."""
from __future__ import annotations

import pytest

from lmplatform.serving.batch_isolation import BatchIsolation, MemberFailed, unwrap


def _tokenize_like(items: list[str]) -> list[int]:
    """Like a fast tokenizer: one bad text in the call fails the whole call."""
    for text in items:
        text.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
    return [len(text) for text in items]


def test_a_failing_batch_fails_only_its_bad_member() -> None:
    isolate = BatchIsolation("test")
    results = isolate(_tokenize_like, ["vpn down", "bad \ud800", "disk full!", "\udfff"])
    assert [unwrap(r) for r in (results[0], results[2])] == [8, 10]
    for bad in (results[1], results[3]):
        assert isinstance(bad, MemberFailed)
        with pytest.raises(UnicodeEncodeError):
            unwrap(bad)
    assert isolate.batches_split == 1


def test_a_good_batch_is_computed_once_and_a_lone_failure_is_not_retried() -> None:
    calls: list[list[str]] = []

    def compute(items: list[str]) -> list[int]:
        calls.append(list(items))
        return _tokenize_like(items)

    isolate = BatchIsolation("test")
    assert isolate(compute, ["a", "bb", "ccc"]) == [1, 2, 3]
    assert calls == [["a", "bb", "ccc"]]
    (only,) = isolate(compute, ["\ud800"])
    assert isinstance(only, MemberFailed) and calls[-1] == ["\ud800"] and len(calls) == 2
    assert isolate.batches_split == 0
