import pytest

from lmplatform.data.fields import SECONDS_PER_DAY
from lmplatform.retrieval.window import TimeWindow


def test_a_window_holds_its_ends_and_never_a_document_of_unknown_time() -> None:
    window = TimeWindow("created", after=10.0, before=20.0)
    assert [window.admits({"created": t}) for t in (9.9, 10, 15.5, 20, 20.1)] == [False, True, True, True, False]
    assert not window.admits({}) and not window.admits({"created": ""}) and not window.admits({"created": "soon"})
    assert not window.admits({"opened": 15})  # another field is not the window's
    assert TimeWindow("created", before=20.0).admits({"created": -1e9})  # open at one end
    # as parse_time reads it: 1970-01-01T00:00:15Z and "15" are both 15 s
    assert window.admits({"created": "1970-01-01T00:00:15Z"}) and window.admits({"created": "15"})


def test_days_before_ends_at_the_moment_and_an_empty_window_is_refused() -> None:
    window = TimeWindow.days_before("created", 400 * SECONDS_PER_DAY, 365)
    assert (window.after, window.before) == (35 * SECONDS_PER_DAY, 400 * SECONDS_PER_DAY)
    with pytest.raises(ValueError, match="ends before it starts"):
        TimeWindow("created", after=2.0, before=1.0)
