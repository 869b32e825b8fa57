"""The ASGI guard on raw scopes, without Ray: the bearer token under any route prefix, and the open paths."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

import pytest

from lmplatform.serving import http_guard
from lmplatform.serving.routes import OPEN_PATHS, app_path
from lmplatform.serving.settings import token_sha256

TOKEN = "s3cret"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def _status(path: str, root_path: str = "", token: Optional[str] = None, method: str = "POST") -> tuple[int, Any]:
    """The guard's answer to a request, as Serve's proxy hands it over (`path` includes `root_path`)."""
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    scope = {"type": "http", "method": method, "path": path, "root_path": root_path, "headers": headers}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(http_guard.RequestGuard(_app)(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body or b"{}")


@pytest.fixture(autouse=True)
def token_configured():
    http_guard.configure_guard(token_sha256(TOKEN), 1_000_000)
    yield
    http_guard.configure_guard(None, 1_000_000)


@pytest.mark.parametrize("root", ["", "/lmp", "/lmp/", "/team/search"])
def test_the_token_holds_under_any_route_prefix(root: str) -> None:
    prefix = root.rstrip("/")
    for route in ("/v1/search", "/v1/documents", "/v1/documents/a%0Ab", "/v1/nowhere", "/metrics", "/"):
        status, body = _status(prefix + route, root)
        assert (status, body.get("field")) == (401, "authorization"), (root, route)
        assert _status(prefix + route, root, token=TOKEN)[0] == 200
        assert _status(prefix + route, root, token="wrong")[0] == 401
    for page in OPEN_PATHS:  # the health check and the OpenAPI pages need none
        assert _status(prefix + page, root, method="GET")[0] == 200, (root, page)


def test_without_a_token_configured_every_path_is_open() -> None:
    http_guard.configure_guard(None, 1_000_000)
    assert _status("/lmp/v1/search", "/lmp")[0] == 200


def test_app_path_strips_the_route_prefix_only_at_a_segment_boundary() -> None:
    assert app_path({"path": "/lmp/v1/search", "root_path": "/lmp"}) == "/v1/search"
    assert app_path({"path": "/lmp", "root_path": "/lmp"}) == "/"
    assert app_path({"path": "/lmpx/v1/search", "root_path": "/lmp"}) == "/lmpx/v1/search"
    assert app_path({"path": "/v1/search", "root_path": ""}) == "/v1/search"
    assert app_path({"path": "/v1/search"}) == "/v1/search"


def test_a_path_with_a_control_character_is_refused_before_any_route_reads_it() -> None:
    for path, field in [("/v1/documents/x\n", "id"), ("/v1/documents/a\x00b", "id"), ("/v1/search\n", "path"),
                        ("/lmp/v1/documents/x\r", "id")]:
        status, body = _status(path, "/lmp" if path.startswith("/lmp") else "", token=TOKEN, method="DELETE")
        assert (status, body["field"]) == (422, field), path
    assert _status("/v1/documents/x y\u00e9", token=TOKEN, method="DELETE")[0] == 200  # other text is an id
