"""Text cleaning as in the NHS incident-report study.

Carriage returns, tabs and runs of white space become single spaces; mojibake
(UTF-8 read as Latin-1 and similar) is repaired by ftfy; control and replacement
characters left over from bad encodings are dropped.
"""
from __future__ import annotations

import re
import unicodedata

import ftfy

_WHITESPACE = re.compile(r"\s+")
_REPLACEMENT_CHAR = "\ufffd"


def clean_text(text: str) -> str:
    text = ftfy.fix_text(text, normalization="NFC")
    text = "".join(
        ch for ch in text if ch == " " or ch.isspace() or (unicodedata.category(ch)[0] != "C" and ch != _REPLACEMENT_CHAR)
    )
    return _WHITESPACE.sub(" ", text).strip()
