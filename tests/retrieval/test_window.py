from typing import Any

import pytest

from lmplatform.data.fields import SECONDS_PER_DAY
from lmplatform.retrieval.store import StoredDocument
from lmplatform.retrieval.window import TimeWindow


def admits(window: TimeWindow, metadata: dict[str, Any]) -> bool:
    """As a served search asks: the stored document's time in the window's field."""
    return window.contains(StoredDocument("", "a report", metadata=metadata).time(window.field))


def test_a_window_holds_its_ends_and_never_a_document_of_unknown_time() -> None:
    window = TimeWindow("created", after=10.0, before=20.0)
    assert [admits(window, {"created": t}) for t in (9.9, 10, 15.5, 20, 20.1)] == [False, True, True, True, False]
    assert not admits(window, {}) and not admits(window, {"created": ""}) and not admits(window, {"created": "soon"})
    assert not admits(window, {"opened": 15})  # another field is not the window's
    assert admits(TimeWindow("created", before=20.0), {"created": -1e9})  # open at one end
    # as parse_time reads it: 1970-01-01T00:00:15Z and "15" are both 15 s
    assert admits(window, {"created": "1970-01-01T00:00:15Z"}) and admits(window, {"created": "15"})


def test_a_documents_time_is_parsed_once() -> None:
    document = StoredDocument("", "a report", metadata={"created": "2020-01-01T00:00:00Z"})
    assert document.time("created") == 1577836800.0
    document.metadata["created"] = "not read again"  # the cached value answers
    assert document.time("created") == 1577836800.0 and document.time("closed") is None


def test_days_before_ends_at_the_moment_and_an_empty_window_is_refused() -> None:
    window = TimeWindow.days_before("created", 400 * SECONDS_PER_DAY, 365)
    assert (window.after, window.before) == (35 * SECONDS_PER_DAY, 400 * SECONDS_PER_DAY)
    with pytest.raises(ValueError, match="ends before it starts"):
        TimeWindow("created", after=2.0, before=1.0)
