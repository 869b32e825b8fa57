"""Long texts cut to the head an encoder reads, before the tokenizer sees them.

An encoder reads a text's first `max_seq_length` tokens, but a tokenizer asked to truncate still tokenizes the
whole text first: a 95,839-character bug report with its logs took 80 ms to tokenize for 128 tokens on 2 cores,
more than encoding it (bench/serve_reports.py). `encoder_heads` hands the tokenizer a prefix instead, one that
yields the same tokens.

Why a prefix gives the same tokens: it ends where whitespace starts, and every tokenizer family here (WordPiece,
byte-level BPE, SentencePiece's Metaspace) splits words at whitespace before anything else, with normalisers that
act on single characters. So the prefix's tokens are the text's first tokens, except perhaps at the cut itself,
and a prefix is only taken when it holds `margin` tokens more than the encoder keeps.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

CHARS_PER_TOKEN = 8  # a first prefix of max_length * 8 characters: English prose runs 4-5 per token, logs fewer
MARGIN = 8
_LAST_SPACE = re.compile(r"\S\s")


def encoder_head(tokenizer: Any, text: str, max_length: int, margin: int = MARGIN) -> str:
    """The shortest tried prefix of `text` whose tokens truncated to `max_length` are the whole text's.

    Prefixes of max_length * 8, then 4 times as many, characters are tried, each cut back to its last whitespace;
    a prefix with fewer than max_length + margin tokens (no special tokens counted) is not enough, and a text with
    no whitespace in the range is taken whole."""
    budget = max_length * CHARS_PER_TOKEN
    while len(text) > budget:
        cut = _last_space_before(text, budget)
        if cut is not None:
            head = text[:cut]
            ids = tokenizer(head, add_special_tokens=False, truncation=False)["input_ids"]
            if len(ids) >= max_length + margin:
                return head
        budget *= 4
    return text


def encoder_heads(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[str]:
    """`encoder_head` of each text (a short text is returned as it is after a length check)."""
    return [encoder_head(tokenizer, text, max_length) for text in texts]


def _last_space_before(text: str, end: int) -> int | None:
    """The index just past the last non-space character that whitespace follows in text[:end + 1], or None."""
    found = None
    for match in _LAST_SPACE.finditer(text, max(0, end // 2), end + 1):
        found = match.start() + 1
    return found
