"""The one shape of every HTTP error: `{"error", "field", "details"}`, always renderable.

Error bodies can echo what the client sent (a field name is a JSON key the client chose,
a parser's message may quote the input), and JSON may carry lone UTF-16 surrogates
(`"\\ud800"`), which no UTF-8 encoder accepts. Starlette's JSONResponse writes non-ASCII
characters as UTF-8, so such an echo would turn a 4xx into a 500. Error bodies are
therefore written ASCII-only, with `\\uXXXX` escapes: valid JSON for any Python string,
whatever a message comes to hold.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from starlette.responses import JSONResponse

from lmplatform.serving.schemas import ErrorResponse


class AsciiJSONResponse(JSONResponse):
    """A JSONResponse that escapes every non-ASCII character, so any Python string renders."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(status: int, message: str, field: Optional[str] = None, details: Optional[list] = None,
                   headers: Optional[dict[str, str]] = None) -> JSONResponse:
    body = ErrorResponse(error=message, field=field, details=details or []).model_dump()
    return AsciiJSONResponse(status_code=status, content=body, headers=headers)
