"""The row rules shared by the training and evaluation readers: texts, labels, scored pairs, joined fields, and the reasons."""
from __future__ import annotations

from lmplatform.data.fields import join_fields, label_value, labelled_text, scored_pair, text_field_value


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
