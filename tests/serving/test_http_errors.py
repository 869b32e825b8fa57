"""Error bodies render for any string a message or a field name may hold, without Ray."""
from __future__ import annotations

import json

from lmplatform.serving.http_errors import error_response


def test_an_error_naming_a_lone_surrogate_still_renders_as_json() -> None:
    response = error_response(422, "query: bad \ud800 text", "\ud800", [{"field": "\udfff"}])
    assert response.status_code == 422 and response.body.isascii()
    assert json.loads(response.body) == {"error": "query: bad \ud800 text", "field": "\ud800", "details": [{"field": "\udfff"}]}
