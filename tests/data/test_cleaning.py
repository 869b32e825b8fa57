from lmplatform.data.cleaning import clean_text


def test_whitespace_is_collapsed() -> None:
    assert clean_text("  disk\tfull\r\n on   node 3 \n") == "disk full on node 3"


def test_mojibake_is_repaired() -> None:
    assert clean_text("the cafÃ© server") == "the café server"


def test_control_and_replacement_characters_are_dropped() -> None:
    assert clean_text("bad\x00 byte \ufffd here\x07") == "bad byte here"
