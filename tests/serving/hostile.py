"""Hypothesis strategies for hostile request bodies, as raw bytes, for the routes that take one (and document ids for paths).

The routes fuzzed are those `lmplatform.serving.routes` declares with a request model (`fuzzed`); the bodies are
shaped by that model, so a route taking a model no route took before needs its strategies here (`_shaped`,
`well_formed`), which tests/serving/test_routes.py checks without Ray.

`st.text()` never draws a surrogate, and `httpx.post(json=...)` could not send one (it
encodes UTF-8), so bodies are written here with `json.dumps`, which escapes a lone
surrogate as `\\udXXX` and writes NaN/Infinity literals, both of which Python's JSON parser
(the service's) accepts. Around well-formed requests built from real words (so that many
reach the models) come surrogates, control and format characters, numbers of every size
and kind, nesting far past the parser's recursion limit, wrong types, unknown keys,
broken JSON and non-UTF-8 bytes, sent with every kind of Content-Type or none.
"""
from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from lmplatform.serving.routes import ROUTES, Route
from lmplatform.serving.schemas import (
    DocumentsRequest,
    DuplicatesRequest,
    EmbeddingsRequest,
    SearchRequest,
    SimilarityRequest,
    TextsRequest,
)
from tests.serving.servable import WORDS


def fuzzed(live: bool) -> tuple[Route, ...]:
    """The routes taking a JSON body that a service answers without live updates (False: test_service.py), or only
    with them on (True: test_live_service.py)."""
    return tuple(route for route in ROUTES if route.request is not None and route.live == live)


_word = st.sampled_from(sorted({w for words in WORDS.values() for w in words})).map(lambda w: w + " ")
_surrogate = st.characters(categories=["Cs"])
_control = st.characters(categories=["Cc", "Cf", "Zl", "Zp"])  # NUL, ESC, zero-width, bidi, U+2028
_any_char = st.characters(codec=None, categories=None)  # every code point hypothesis draws, surrogates included
# Words, now and then a control or format character among them: valid text, often unusual.
readable = st.tuples(_word, st.lists(st.one_of(_word, _word, _control), max_size=9)).map(lambda t: t[0] + "".join(t[1]))
text = st.one_of(
    readable,
    readable,
    st.tuples(readable, _surrogate, readable).map("".join),  # one lone surrogate inside good text
    st.text(alphabet=_any_char, max_size=20),  # anything, surrogates included
    st.sampled_from(["", " ", "\t\n", "\u3000", "x" * 301]),  # empty, blank, over the limits
)
number = st.one_of(
    st.integers(-3, 25),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -0.0, 2**31, 2**63, -(2**63) - 1, 10**300, 1e308, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_value = st.recursive(
    st.none() | st.booleans() | number | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=8,
)


# A document id: mostly words (so some upserts go through), else any text, blank, or over limits.max_id_chars.
document_id = st.one_of(readable.map(str.strip).filter(bool), readable.map(str.strip).filter(bool), text,
                        st.sampled_from(["", " ", "id/with/slashes", "ü-ç-∂", "i" * 41]))
# An id in a URL path: any text a URL can carry (percent-encoded as UTF-8, so no lone surrogate).
path_id = st.one_of(document_id, st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=50)).filter(
    lambda value: not any(0xD800 <= ord(c) <= 0xDFFF for c in value))


# Metadata: the fusion's fields or any key, with a time now and then, and values of every JSON kind.
_metadata = st.one_of(st.dictionaries(st.one_of(st.sampled_from(["product", "component", "created"]), text),
                                      st.one_of(text, number, st.booleans(), st.none(), json_value,
                                                st.sampled_from(["2001-01-10T09:30:00Z", "yesterday", "1e400"])),
                                      max_size=4), json_value)


def _documents(value: st.SearchStrategy[Any], label: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(st.fixed_dictionaries({"id": document_id, "text": value},
                                          optional={"title": value, "label": label, "metadata": _metadata}),
                    min_size=1, max_size=4)


def _report(value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"text": value}, optional={"id": document_id, "title": value, "metadata": _metadata})


_encoding_format = st.sampled_from(["float", "base64"])
_mode = st.sampled_from(["dense", "hybrid", "metadata"])
_weight = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0, 1]))
# A time as trackers write it (ISO 8601, Jira's, RFC 2822, epoch seconds or milliseconds), and a seq.
_time = st.sampled_from(["2001-01-10T09:30:00Z", "01/Jan/01 09:30", "Wed, 10 Jan 2001 09:30:00 +0000", 979_119_000,
                         979_119_000_000])
_seq = st.integers(0, 40)


def _texts() -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(readable, min_size=1, max_size=4), st.lists(text, min_size=1, max_size=4),
                     st.lists(st.one_of(text, json_value), max_size=6), json_value)


def _no_strategies(route: Route) -> LookupError:
    return LookupError(f"no hostile bodies for {route.request.__name__ if route.request else 'a route without a body'} "
                       f"({route.method} {route.path}): add its strategies to tests/serving/hostile.py")


def _shaped(route: Route) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies with the request model's keys (often right, sometimes wrong types), now and then an unknown key."""
    extra = {"extra": json_value, "\ud800": json_value}  # an unknown key, and one no UTF-8 can hold
    if route.request is SearchRequest:
        required = {"query": st.one_of(text, text, json_value)}
        optional = {"k": st.one_of(st.integers(1, 20), number, json_value), "rerank": st.one_of(st.booleans(), json_value),
                    "mode": st.one_of(_mode, text, json_value), "bm25_weight": st.one_of(_weight, number, json_value),
                    "metadata": _metadata, "exclude_ids": st.one_of(st.lists(document_id, max_size=3), json_value),
                    "filed_after": st.one_of(_time, text, number, json_value),
                    "filed_before": st.one_of(_time, text, number, json_value),
                    "time_field": st.one_of(st.just("created"), text, json_value),
                    "min_seq": st.one_of(_seq, number, json_value)}
    elif route.request is SimilarityRequest:
        required = {"a": st.one_of(text, text, json_value), "b": st.one_of(text, text, json_value)}
        optional = {}
    elif route.request is DocumentsRequest:
        required = {"documents": st.one_of(_documents(st.one_of(text, json_value), st.one_of(text, json_value)), json_value,
                                           st.lists(json_value, max_size=3))}
        optional = {}
    elif route.request is DuplicatesRequest:
        required = {"report": st.one_of(_report(st.one_of(text, json_value)), json_value)}
        optional = {"k": st.one_of(st.integers(1, 20), number, json_value), "mode": st.one_of(_mode, text, json_value),
                    "add": st.one_of(st.booleans(), json_value), "window_days": st.one_of(number, json_value),
                    "min_seq": st.one_of(_seq, number, json_value)}
    elif route.request is EmbeddingsRequest:
        required = {"input": st.one_of(text, _texts()), "model": st.one_of(text, text, json_value)}
        optional = {"encoding_format": st.one_of(_encoding_format, json_value), "dimensions": st.one_of(number, json_value),
                    "user": st.one_of(text, json_value)}
    elif route.request is TextsRequest:
        required, optional = {"texts": _texts()}, {}
    else:
        raise _no_strategies(route)
    shaped = st.fixed_dictionaries(required, optional=optional)
    return st.one_of(shaped, shaped, st.fixed_dictionaries(required, optional={**optional, **extra}))


def well_formed(route: Route) -> st.SearchStrategy[dict[str, Any]]:
    """The request model's keys with values of the right type: mostly valid, or refused for the text alone."""
    field_text = st.one_of(readable, readable, readable, text)
    if route.request is SearchRequest:
        return st.fixed_dictionaries({"query": field_text}, optional={"k": st.integers(1, 20), "rerank": st.booleans(),
                                                                      "mode": _mode, "bm25_weight": _weight,
                                                                      "filed_after": _time})
    if route.request is SimilarityRequest:
        return st.fixed_dictionaries({"a": field_text, "b": field_text})
    if route.request is DocumentsRequest:
        return st.fixed_dictionaries({"documents": _documents(field_text, st.one_of(st.none(), _word, document_id))})
    if route.request is DuplicatesRequest:  # add: true is refused by a read-only service (422 naming add)
        return st.fixed_dictionaries({"report": _report(field_text)},
                                     optional={"k": st.integers(1, 20), "mode": _mode, "add": st.booleans(),
                                               "window_days": st.sampled_from([1, 30.5, 365])})
    if route.request is EmbeddingsRequest:  # the OpenAI SDK's shape: a text or a list, a model name, often base64
        one_or_many = st.one_of(field_text, st.lists(readable, min_size=1, max_size=4),
                                st.lists(field_text, min_size=1, max_size=4))
        return st.fixed_dictionaries({"input": one_or_many, "model": st.one_of(st.just("text-embedding-3-small"), field_text)},
                                     optional={"encoding_format": _encoding_format})
    if route.request is TextsRequest:
        texts = st.one_of(st.lists(readable, min_size=1, max_size=4), st.lists(field_text, min_size=1, max_size=4))
        return st.fixed_dictionaries({"texts": texts})
    raise _no_strategies(route)


def _dumps(body: Any) -> bytes:
    return json.dumps(body).encode("ascii")  # ensure_ascii: lone surrogates become \udXXX escapes


def _nested(depth: int, kind: str) -> bytes:
    """`k` as `depth` nested lists ([[[]]]) or objects ({"a": {"a": 1}})."""
    inner = "[" * depth + "]" * depth if kind == "[" else '{"a": ' * depth + "1" + "}" * depth
    return f'{{"query": "vpn", "k": {inner}}}'.encode()


_raw = st.one_of(
    st.builds(_nested, st.integers(1, 2500), st.sampled_from("[{")),  # past Python's recursion limit (1000), under 20 kB
    st.integers(4000, 9000).map(lambda digits: b'{"query": "vpn", "k": 1' + b"0" * digits + b"}"),  # int-parse limit
    st.sampled_from([b'{"query": NaN}', b'{"query": "vpn", "k": Infinity}', b'{"query": "vpn", "k": -Infinity}',
                     b'{"texts": [NaN, Infinity]}', b'{"a": "x", "b": -Infinity}', b"NaN", b"null", b"[]", b'""',
                     b'{"query": "vpn \\ud800"}', b'{"query": "\\udfff\\ud800"}', b'{"query": "\\ud83d\\ude00 vpn"}',
                     b'{"texts": ["\\u0000\\u001b\\u200b"]}', b'{"query": "vpn"', b"\xff\xfe{}", b"\xef\xbb\xbf{}"]),
    st.binary(max_size=64),
)
content_type = st.sampled_from([
    "application/json", "application/json; charset=utf-8", None, "application/x-www-form-urlencoded",
    "text/plain", "multipart/form-data; boundary=x", "application/octet-stream", "application/problem+json",
])


def bodies(route: Route) -> st.SearchStrategy[bytes]:
    """Raw request bodies for `route`: mostly JSON of its request model's shape, then any JSON, then raw bytes."""
    return st.one_of(well_formed(route).map(_dumps), well_formed(route).map(_dumps), _shaped(route).map(_dumps),
                     json_value.map(_dumps), _raw)


def has_lone_surrogate(body: bytes) -> bool:
    """Whether the body, parsed as Python parses it, holds a lone surrogate anywhere (keys included)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return False
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False
    return False
