"""The rows of distractor files as retrieval sets read them: each row's document text, joined and cleaned one way
everywhere (`retrieval_validation.read_distractors` keeps the texts, `online_validation.text_times` their times)."""
from __future__ import annotations

from typing import Any, Iterator, Optional

from lmplatform.data.cleaning import clean_text
from lmplatform.data.fields import join_fields
from lmplatform.data.readers import BadRow, detect_format, expand_paths, read_rows
from lmplatform.retrieval.settings import DistractorConfig


def distractor_rows(cfg: DistractorConfig, clean: bool) -> Iterator[Optional[tuple[str, dict[str, Any]]]]:
    """(text, fields) of every row of `cfg.paths` in file order: `cfg.fields` joined (a text file's line as it is),
    cleaned when `clean`; None for a row that does not parse. The text may be blank."""
    for path in expand_paths(cfg.paths):
        fmt = detect_format(path)
        names = ["text"] if fmt == "text" else cfg.fields
        for row in read_rows(path, fmt):
            if isinstance(row, BadRow):
                yield None
                continue
            text = join_fields(row.fields, names)
            yield (clean_text(text) if clean else text), row.fields
