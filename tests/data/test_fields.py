"""The row rules shared by the training and evaluation readers: texts, labels, scored pairs, joined fields, times, and the
reasons."""
from __future__ import annotations

import pytest

from lmplatform.data.fields import (
    iso_utc,
    join_fields,
    label_value,
    labelled_text,
    parse_time,
    scored_pair,
    text_field_value,
)
from lmplatform.data.readers import DataError


def test_text_and_label_values() -> None:
    assert text_field_value({"t": "  a\tb "}, "t", clean=True) == "a b"
    assert text_field_value({"t": "  a "}, "t", clean=False) == "  a "  # kept as read
    assert text_field_value({"t": "   "}, "t", clean=False) is None and text_field_value({"t": 3}, "t", clean=False) is None
    assert label_value({"y": 2}, "y") == "2" and label_value({"y": " b "}, "y") == "b"
    assert label_value({"y": None}, "y") is None and label_value({"y": [1]}, "y") is None and label_value({"y": " "}, "y") is None


def test_labelled_text_joins_several_fields_and_names_what_is_missing() -> None:
    assert labelled_text({"title": " Disk ", "body": "full ", "y": "storage"}, ["title", "body"], "y", clean=False) == (
        "Disk. full", "storage")
    assert labelled_text({"title": " Disk ", "y": 1}, ["title", "body"], "y", clean=False) == (" Disk ", "1")
    assert labelled_text({"y": "a"}, ["text"], "y", clean=True) == "missing text field 'text' (or empty, or not text)"
    assert labelled_text({"y": "a"}, ["title", "body"], "y", clean=True).startswith("no text in ['title', 'body']")
    assert (labelled_text({"text": "x", "y": {}}, ["text"], "y", clean=True)
            == "missing label field 'y' (or null, or not a scalar)")


def test_scored_pair_checks_texts_the_score_and_the_scale() -> None:
    row = {"a": "one", "b": "two", "s": 4}
    assert scored_pair(row, "a", "b", "s", (0.0, 5.0), clean=False) == ("one", "two", 4.0)
    assert scored_pair(row | {"s": 9}, "a", "b", "s", (0.0, 5.0), clean=False) == "score outside the scale (9 not in [0.0, 5.0])"
    assert scored_pair(row | {"s": 9}, "a", "b", "s", None, clean=False) == ("one", "two", 9.0)  # scale inferred later
    assert scored_pair(row | {"s": True}, "a", "b", "s", None, clean=False) == "missing score field 's' (or not a number)"
    assert scored_pair(row | {"b": ""}, "a", "b", "s", None, clean=False) == "missing text field 'b' (or empty, or not text)"


def test_join_fields_keeps_the_non_empty_values_as_text() -> None:
    row = {"title": " Disk full ", "text": "", "code": 7, "blank": "  ", "none": None}
    assert join_fields(row, ["title", "text", "missing", "code", "blank", "none"]) == "Disk full. 7"
    assert join_fields(row, ["text", "blank"]) == ""


UTC_0252 = 1_577_847_120.0  # 2020-01-01T02:52:00Z


@pytest.mark.parametrize("value", [
    "2020-01-01T02:52:00Z", "2020-01-01T02:52:00z", "2020-01-01T02:52:00.000+0000", "2020-01-01 02:52:00 +0000",
    "2020-01-01T03:52:00+01:00", "2020-01-01T02:52:00",  # no zone: UTC
    "2020-01-01T02:52:00.000000000Z", "2020-01-01T02:52Z", "2019-12-31T21:52:00-05", "2020-01-01T03:52:00,0+0100",
    "20200101T025200Z", "20200101T0252", "20200101T035200+0100",  # ISO basic, read alike on every Python
    "01/Jan/20 02:52", "01/JAN/20 02:52:00", "01/january/2020 2:52 AM", "31/Dec/19 09:52 PM -0",
    "Wed, 01 Jan 2020 02:52:00 +0000", "Tue, 31 Dec 2019 21:52:00 -0500", "01 Jan 2020 02:52:00",
    UTC_0252, 1_577_847_120, "1577847120", " 1577847120 ", 1_577_847_120_000, "1577847120000", "1577847120000.0",
])
def test_parse_time_reads_every_tracker_format(value: object) -> None:
    if value == "31/Dec/19 09:52 PM -0":  # a Jira time takes no zone: not a time
        with pytest.raises(DataError, match="is not a time"):
            parse_time(value, "created")
        return
    assert parse_time(value, "created") == UTC_0252
    assert iso_utc(parse_time(value, "created")) == "2020-01-01T02:52:00Z"  # type: ignore[arg-type]


def test_parse_time_reads_iso_dates_alike_on_every_python() -> None:
    """`datetime.fromisoformat` reads more forms on 3.11 than on 3.10; parse_time reads the same ones on both."""
    assert parse_time("20200101", "t") == parse_time("2020-01-01", "t") == 1_577_836_800.0  # a date, not epoch seconds
    assert parse_time("2020-01-01T02:52:00.1234567Z", "t") == UTC_0252 + 0.123456
    for bad in ("2020-W01-3", "2020W013", "2020-001", "2020-01-01T25:00", "2020-01-01T02:52+24:00", "2020-1-1",
                "2020-01-01T02:52:00 UTC"):
        with pytest.raises(DataError, match="is not a time"):
            parse_time(bad, "t")


def test_parse_time_jira_clock_and_two_digit_years() -> None:
    assert iso_utc(parse_time("01/Jan/20 12:05 AM", "t")) == "2020-01-01T00:05:00Z"  # type: ignore[arg-type]
    assert iso_utc(parse_time("01/Jan/20 12:05 PM", "t")) == "2020-01-01T12:05:00Z"  # type: ignore[arg-type]
    assert iso_utc(parse_time("01/Jan/20 1:05 p.m.", "t")) == "2020-01-01T13:05:00Z"  # type: ignore[arg-type]
    assert iso_utc(parse_time("5/Sep/99 23:59:59", "t")) == "1999-09-05T23:59:59Z"  # type: ignore[arg-type]
    assert iso_utc(parse_time("05/sept/68 00:00", "t")) == "2068-09-05T00:00:00Z"  # type: ignore[arg-type]
    for bad in ("31/Feb/20 01:00", "01/Foo/20 01:00", "01/Jan/20 13:00 PM", "01/Jan/20 24:00", "01/Jan/20"):
        with pytest.raises(DataError, match=f"t: {bad!r} is not a time"):
            parse_time(bad, "t")


def test_parse_time_does_not_depend_on_the_locale() -> None:
    import locale

    before = locale.setlocale(locale.LC_TIME)
    try:
        for name in ("de_DE.UTF-8", "fr_FR.UTF-8", "C"):  # where the machine has them
            try:
                locale.setlocale(locale.LC_TIME, name)
            except locale.Error:
                continue
            assert parse_time("01/Mar/20 02:52", "t") == parse_time("2020-03-01T02:52:00Z", "t")
    finally:
        locale.setlocale(locale.LC_TIME, before)


def test_parse_time_epoch_units() -> None:
    assert parse_time(86_400, "t") == 86_400.0 and parse_time("86400", "t") == 86_400.0  # small values stay seconds
    assert parse_time(-86_400, "t") == -86_400.0 and parse_time(9_999_999_999, "t") == 9_999_999_999.0
    assert parse_time(100_000_000_000, "t") == 100_000_000.0  # 1e11: the first milliseconds
    assert parse_time(50_000_000_000, "t", epoch_unit="ms") == 50_000_000.0
    assert parse_time(50_000_000_000, "t", epoch_unit="s") == 50_000_000_000.0
    assert parse_time("1577847120", "t", epoch_unit="ms") == 1_577_847.12
    assert parse_time(UTC_0252, "t", epoch_unit="s") == UTC_0252


@pytest.mark.parametrize("value", [10_000_000_000, 50_000_000_000, "50000000000", 99_999_999_999.5,
                                   100_000_000_000_000, -50_000_000_000, 1e300])
def test_parse_time_refuses_an_ambiguous_epoch_naming_the_field(value: object) -> None:
    with pytest.raises(DataError, match=r"^created: .* is ambiguous epoch time: neither plausible seconds .* give the unit"):
        parse_time(value, "created")


def test_parse_time_refuses_junk_and_lists_the_formats() -> None:
    for bad in ("last tuesday", "10000-01-01", True, False, [2001], {"t": 1}, float("nan"), float("inf"), 10**400, " ",
                "2020-13-01", "1e", "0x10"):
        with pytest.raises(DataError, match="is not a time") as caught:
            parse_time(bad, "created")
        message = str(caught.value)
        assert message.startswith("created: ") and "ISO 8601" in message and "RFC 2822" in message
        assert "dd/MMM/yy HH:mm" in message and "epoch seconds" in message and len(message) < 400
    with pytest.raises(DataError, match="outside the years 1 to 9999"):
        parse_time(1e300, "created", epoch_unit="s")
    assert parse_time(None, "created") is None and parse_time("", "created") is None


def test_iso_utc_is_whole_seconds_in_utc() -> None:
    assert iso_utc(UTC_0252) == "2020-01-01T02:52:00Z"
    assert iso_utc(UTC_0252 + 0.999) == "2020-01-01T02:52:00Z"
    assert iso_utc(0) == "1970-01-01T00:00:00Z" and iso_utc(-1) == "1969-12-31T23:59:59Z"
