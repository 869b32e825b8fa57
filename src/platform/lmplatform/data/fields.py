"""What one row's fields hold: a text, a label, a time, a (text, label) example, a scored sentence pair; or why the
row is unusable (a reason string, which the readers record with the row's file and line).

One place for these rules, used by the training readers (the `sts` and `classifier` objectives through
`data.labelled.read_labelled`) and the evaluation readers (`data.sts_pairs.read_pairs_jsonl`,
`data.labelled_texts.read_labelled_texts`).
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence, TypeVar, Union

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


# A list value's items (components, labels, versions) joined into one metadata value, as the tracker importer writes it.
LIST_SEPARATOR = ", "

EpochUnit = Literal["auto", "s", "ms"]

TIME_FORMATS = (
    "ISO 8601 (2020-01-01T02:52:00Z, 2020-01-01 02:52:00 +0000, 20200101T025200Z)",
    "RFC 2822 (Wed, 01 Jan 2020 02:52:00 +0000)",
    "Jira's dd/MMM/yy HH:mm (01/Jan/20 02:52, 01/Jan/20 2:52 AM)",
    "epoch seconds (below 1e10) or milliseconds (1e11 to 1e14), as a number or its digits",
)
_MONTHS = {name: number for number, names in enumerate(
    (("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")), start=1) for name in names}
# Jira's CSV and UI format, dd/MMM/yy HH:mm, with optional seconds, a four-digit year and a 12-hour clock. Read
# by hand: strptime's %b follows the process locale, and an export's month names are English wherever it is read.
_JIRA_TIME = re.compile(
    r"(\d{1,2})/([A-Za-z]{3,9})/(\d{2}|\d{4})\s+(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s*([AaPp])\.?[Mm]\.?)?")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ISO_ZONE = r"(?:\s*([Zz])|\s*([+-])(\d{2})(?::?(\d{2}))?)?"
_ISO_EXTENDED = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:(?:T|\s+)(\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?)?" + _ISO_ZONE)
_ISO_BASIC = re.compile(r"(\d{4})(\d{2})(\d{2})(?:T(\d{2})(?:(\d{2})(?:(\d{2})(?:[.,](\d+))?)?)?)?" + _ISO_ZONE)
# As seconds, [1e10, 1e11) is the years 2286 to 5138; as milliseconds, 1970-04 to 1973-03; 1e14 and more is beyond
# the year 5000 either way. Neither reading of such a number is a plausible report time, so its unit must be given.
_SECONDS_BELOW, _MILLISECONDS_FROM, _MILLISECONDS_BELOW = 1e10, 1e11, 1e14
SECONDS_PER_DAY = 86_400.0  # parse_time's unit to days


def parse_time(value: Any, field: str, *, epoch_unit: EpochUnit = "auto") -> Optional[float]:
    """Seconds since the epoch of a time as trackers export it; None when the value is None or "".

    Read: ISO 8601 ("2000-10-25 10:37:00 +0000", "2020-01-01T02:52:00Z"), Jira's "01/Jan/20 02:52" (also with
    seconds, a four-digit year or AM/PM), RFC 2822 ("Mon, 20 Nov 1995 19:12:08 -0500"), and epoch numbers or
    their digits as a string. A time without a zone is UTC. With `epoch_unit` "auto" an epoch number below 1e10
    in magnitude is seconds and one from 1e11 below 1e14 milliseconds (as exports give them: a Unix time, a Java
    or JavaScript one); anything between or beyond is ambiguous and refused rather than misread by a factor
    of 1000. "s" or "ms" states the unit. A bool is not a time. Anything unread is a `DataError` naming the field
    and listing the formats read."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _epoch(value, value, field, epoch_unit)
    if isinstance(value, str):
        text = value.strip()
        moment = _iso_time(text)
        if moment is None and _NUMBER.fullmatch(text):
            return _epoch(float(text), value, field, epoch_unit)
        moment = moment or _jira_time(text) or _rfc2822_time(text)
        if moment is not None:
            try:
                return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
            except (ValueError, OverflowError):  # a moment at the edge of datetime's range, shifted beyond it
                pass
    raise DataError(_not_a_time(value, field))


def iso_utc(seconds: float) -> str:
    """`seconds` since the epoch as ISO 8601 in UTC to the whole second ("2020-01-01T02:52:00Z"): one fixed width,
    so that such times sort as text in the order they happened."""
    return datetime.fromtimestamp(math.floor(seconds), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(number: Union[int, float], value: Any, field: str, unit: EpochUnit) -> float:
    """Seconds of an epoch number in `unit`, or a `DataError`: not finite, beyond a float, or of no plausible unit."""
    try:
        seconds = float(number)
    except OverflowError:  # an integer beyond a float
        seconds = math.nan
    if not math.isfinite(seconds):
        raise DataError(_not_a_time(value, field))
    if unit == "auto":
        magnitude = abs(seconds)
        if magnitude < _SECONDS_BELOW:
            return seconds
        if _MILLISECONDS_FROM <= magnitude < _MILLISECONDS_BELOW:
            return seconds / 1000
        raise DataError(f"{field}: {_shown(value)} is ambiguous epoch time: neither plausible seconds (below 1e10) nor "
                        "milliseconds (1e11 to 1e14); give the unit (epoch unit 's' or 'ms')")
    if unit not in ("s", "ms"):
        raise ValueError(f"epoch_unit must be 'auto', 's' or 'ms', not {unit!r}")
    seconds = seconds / 1000 if unit == "ms" else seconds
    try:
        datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise DataError(f"{field}: {_shown(value)} is not a time: as epoch {'milliseconds' if unit == 'ms' else 'seconds'} "
                        "it is outside the years 1 to 9999") from None
    return seconds


def _shown(value: Any) -> str:
    """`value` as an error message quotes it, cut short: an integer beyond a float has hundreds of digits."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _not_a_time(value: Any, field: str) -> str:
    return f"{field}: {_shown(value)} is not a time (accepted: {'; '.join(TIME_FORMATS)})"


def _iso_time(text: str) -> Optional[datetime]:
    """ISO 8601 in the forms trackers write, read here rather than by `datetime.fromisoformat`, whose forms grew in
    Python 3.11 (basic "20200101", week and ordinal dates, "Z"): the same export must give the same times on every
    Python the project runs on. Read: a calendar date, extended ("2020-01-01") or basic ("20200101"), then
    optionally a time after "T" or spaces (hours, minutes, seconds, any fraction), then optionally "Z" or an offset
    (+01, +01:00, +0100). Week and ordinal dates are not read."""
    match = _ISO_EXTENDED.fullmatch(text) or _ISO_BASIC.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone, sign, zone_hours, zone_minutes = match.groups()
    try:
        tz = None
        if zone:
            tz = timezone.utc
        elif sign:
            offset = timedelta(hours=int(zone_hours), minutes=int(zone_minutes or 0))
            tz = timezone(-offset if sign == "-" else offset)
        return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                        int((fraction or "0")[:6].ljust(6, "0")), tzinfo=tz)
    except ValueError:  # month 13, hour 25, an offset of a day or more
        return None


def _jira_time(text: str) -> Optional[datetime]:
    """Jira's dd/MMM/yy HH:mm[:ss][ AM|PM]; a two-digit year is 1969-2068 as strptime's %y reads it."""
    match = _JIRA_TIME.fullmatch(text)
    if match is None:
        return None
    day, month_name, year_text, hour_text, minute, second, half = match.groups()
    month = _MONTHS.get(month_name.lower())
    year = int(year_text) if len(year_text) == 4 else int(year_text) + (2000 if int(year_text) < 69 else 1900)
    hour = int(hour_text)
    if month is None or (half and not 1 <= hour <= 12):
        return None
    if half:
        hour = hour % 12 + (12 if half.lower() == "p" else 0)
    try:
        return datetime(year, month, int(day), hour, int(minute), int(second or 0), tzinfo=timezone.utc)
    except ValueError:  # 31/Feb, 25:00
        return None


def _rfc2822_time(text: str) -> Optional[datetime]:
    """RFC 2822 as email headers give it ("Mon, 20 Nov 1995 19:12:08 -0500"); its "-0000" (zone unknown) is UTC."""
    try:
        return parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):  # TypeError and IndexError: Python 3.10's unread input
        return None


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
