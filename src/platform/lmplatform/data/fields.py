"""What one row's fields hold: a text, a label, a time, a (text, label) example, a scored sentence pair; or why the
row is unusable (a reason string, which the readers record with the row's file and line).

One place for these rules, used by the training readers (the `sts` and `classifier` objectives through
`data.labelled.read_labelled`) and the evaluation readers (`data.sts_pairs.read_pairs_jsonl`,
`data.labelled_texts.read_labelled_texts`).
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

from lmplatform.data.cleaning import clean_text
from lmplatform.data.readers import BadRow, DataError, read_rows

Reason = str  # why a row is unusable
Example = TypeVar("Example")


def text_field_value(fields: dict[str, Any], name: str, clean: bool) -> Optional[str]:
    """A cleaned non-empty string from `fields[name]`, or None when missing/empty/not text."""
    value = fields.get(name)
    if not isinstance(value, str):
        return None
    value = clean_text(value) if clean else value
    return value if value.strip() else None


def parse_time(value: Any, field: str) -> Optional[float]:
    """Seconds since the epoch of an ISO 8601 string ("2000-10-25 10:37:00 +0000") or a number; None when empty.
    Anything else is a `DataError` naming the field."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        if isinstance(value, str):
            moment = datetime.fromisoformat(value.strip())
            return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    except (ValueError, OverflowError):  # not ISO 8601; an integer beyond a float; a moment outside the epoch's range
        pass
    raise DataError(f"{field}: {value!r} is not a time (an ISO 8601 string or epoch seconds)")


def label_value(fields: dict[str, Any], name: str) -> Optional[str]:
    """`fields[name]` as text (any scalar, stripped), or None when missing, null, empty or a list/mapping."""
    value = fields.get(name)
    if value is None or isinstance(value, (list, dict)):
        return None
    text = str(value).strip()
    return text or None


def join_fields(fields: dict[str, Any], names: Sequence[str]) -> str:
    """The values of `names` that are not empty, each as text and stripped, joined with '. ' (a missing field
    counts as empty). A report's title and body become one text this way wherever one is searched or indexed."""
    return ". ".join(str(fields[n]).strip() for n in names if fields.get(n) not in (None, "") and str(fields[n]).strip())


def labelled_text(fields: dict[str, Any], text_fields: Sequence[str], label_field: str,
                  clean: bool) -> Union[tuple[str, str], Reason]:
    """(text, label) of one row, or why it is unusable.

    The text is that of the non-empty `text_fields` (each as `text_field_value` gives it); several are
    stripped and joined with '. ' (e.g. title and body), one is kept as read.
    """
    parts = [t for t in (text_field_value(fields, name, clean) for name in text_fields) if t is not None]
    if not parts:
        if len(text_fields) == 1:
            return f"missing text field {text_fields[0]!r} (or empty, or not text)"
        return f"no text in {list(text_fields)} (each missing, empty or not text)"
    label = label_value(fields, label_field)
    if label is None:
        return f"missing label field {label_field!r} (or null, or not a scalar)"
    return (parts[0] if len(parts) == 1 else ". ".join(p.strip() for p in parts)), label


def read_jsonl_examples(path: str, what: str, extract: Callable[[dict[str, Any]], Union[Example, Reason]],
                        keep: Optional[Callable[[dict[str, Any]], bool]] = None,
                        limit: Optional[int] = None) -> tuple[list[Example], list[str]]:
    """Every row of one JSONL file through `extract`: (the examples, the unusable rows as 'file:line: reason').

    Rows `keep` rejects are passed over without a word (a split filter); reading stops after `limit`
    examples. A missing file is a `DataError` naming `what` the file was to hold.
    """
    if not Path(path).is_file():
        raise DataError(f"{what} file not found: {path}")
    examples: list[Example] = []
    bad: list[str] = []
    for row in read_rows(path, "jsonl"):
        if isinstance(row, BadRow):
            bad.append(str(row))
            continue
        if keep is not None and not keep(row.fields):
            continue
        example = extract(row.fields)
        if isinstance(example, str):
            bad.append(str(BadRow(row.path, row.line, example)))
            continue
        examples.append(example)
        if limit and len(examples) >= limit:
            break
    return examples, bad


def scored_pair(fields: dict[str, Any], sentence1_field: str, sentence2_field: str, score_field: str,
                scale: Optional[tuple[float, float]], clean: bool) -> Union[tuple[str, str, float], Reason]:
    """(sentence1, sentence2, score) of one row, or why it is unusable: a text missing, a score that is not
    a number (a bool is not), or one outside `scale` (not checked when the scale is None: inferred later)."""
    texts = []
    for name in (sentence1_field, sentence2_field):
        text = text_field_value(fields, name, clean)
        if text is None:
            return f"missing text field {name!r} (or empty, or not text)"
        texts.append(text)
    score = fields.get(score_field)
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return f"missing score field {score_field!r} (or not a number)"
    if scale is not None and not scale[0] <= float(score) <= scale[1]:
        return f"score outside the scale ({score} not in [{scale[0]}, {scale[1]}])"
    return texts[0], texts[1], float(score)
