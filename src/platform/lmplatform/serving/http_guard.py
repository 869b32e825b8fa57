"""The ASGI guard in front of every route: body size, bearer token, and JSON whatever the Content-Type.

It runs before FastAPI reads the body, in this order:
1. a declared `Content-Length` over `limits.max_body_bytes`: 413 at once, nothing read;
2. any path but the open ones (`routes.OPEN_PATHS`: /healthz and the OpenAPI pages), under any route prefix,
   without the right bearer token when one is configured: 401, nothing read;
   a path holding a control character: 422 naming `id` (a document's path) or `path`;
3. the body is read as it arrives and counted, so a chunked body (no Content-Length)
   is held to the same limit: 413 as soon as it passes it, the rest never read;
4. a body sent to /v1/* is parsed as JSON whatever its Content-Type: every route takes
   JSON, and `curl -d '{...}'` (as the demo prints it) sends
   `application/x-www-form-urlencoded`, which FastAPI would otherwise hand to the model
   as raw bytes ("Input should be a valid dictionary or object").
The body read in step 3 is then handed to the app unchanged.
"""
from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable, Optional

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lmplatform.serving.http_errors import error_response
from lmplatform.serving.routes import API_PREFIX, OPEN_PATHS, app_path
from lmplatform.serving.schemas import first_control_character
from lmplatform.serving.settings import token_sha256

# Per-replica settings, set by the ingress replica at start (`configure_guard`); the guard
# runs before any route, so before the ingress object (and its limits) is reachable.
_GUARD: dict[str, Any] = {"token_sha256": None, "max_body_bytes": 1_000_000}
DOCUMENTS_PATH = "/v1/documents/"


def configure_guard(token_hash: Optional[str], max_body_bytes: int) -> None:
    _GUARD.update(token_sha256=token_hash, max_body_bytes=max_body_bytes)


def _too_large(limit: int) -> Response:
    return error_response(413, f"request body is larger than limits.max_body_bytes ({limit} bytes)", "body")


def _auth_refusal(path: str, headers: Headers) -> Optional[Response]:
    expected = _GUARD["token_sha256"]
    if not expected or path in OPEN_PATHS:
        return None
    scheme, _, token = headers.get("authorization", "").partition(" ")
    challenge = {"WWW-Authenticate": "Bearer"}
    if scheme.lower() != "bearer" or not token:
        return error_response(401, "missing bearer token", "authorization", headers=challenge)
    if not hmac.compare_digest(token_sha256(token.strip()), expected):
        return error_response(401, "invalid bearer token", "authorization", headers=challenge)
    return None


def _control_refusal(path: str) -> Optional[Response]:
    """A 422 for a path holding a control character (decoded from %00-%1F, %7F...): a route's pattern would match
    it only up to a trailing newline (/v1/documents/x%0A as the document 'x'), so it is refused before routing."""
    at = first_control_character(path)
    if at is None:
        return None
    field = "id" if path.startswith(DOCUMENTS_PATH) else "path"
    return error_response(422, f"{field}: the path holds the control character U+{ord(path[at]):04X}; no id holds one",
                          field)


class _Disconnected(Exception):
    """The client went away before its body was complete: there is nobody to answer."""


async def read_body(receive: Receive, limit: int) -> Optional[bytes]:
    """The whole body, or None as soon as more than `limit` bytes arrived (the rest is left unread)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A `receive` that yields the body already read, then defers to the client's (e.g. for a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def _as_json(scope: Scope) -> Scope:
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    return {**scope, "headers": headers + [(b"content-type", b"application/json")]}


class RequestGuard:
    """ASGI middleware applying the module's four checks (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = int(_GUARD["max_body_bytes"])
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _too_large(limit)(scope, receive, send)
            return
        path = app_path(scope)
        refusal = _auth_refusal(path, headers) or _control_refusal(path)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        try:
            body = await read_body(receive, limit)
        except _Disconnected:
            return
        if body is None:
            await _too_large(limit)(scope, receive, send)
            return
        if body and path.startswith(API_PREFIX):
            scope = _as_json(scope)
        await self.app(scope, _replay(body, receive), send)
