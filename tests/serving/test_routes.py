"""The routes' one declaration (serving/routes.py) against the app, its OpenAPI document and the fuzz; without Ray."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmplatform.serving.routes import API_PREFIX, ERROR_STATUSES, PAGES, ROUTES
from lmplatform.serving.schemas import SearchRequest, TextsRequest
from tests.serving import hostile


def _served(router: Any, prefix: str = "") -> set[tuple[str, str]]:
    """(method, path) of every route under `router`, into the routers it includes (Serve's class-based view is one)."""
    served: set[tuple[str, str]] = set()
    for route in router.routes:
        if hasattr(route, "original_router"):
            served |= _served(route.original_router, prefix + route.include_context.prefix)
        else:
            served |= {(method, prefix + route.path) for method in route.methods - {"HEAD"}}
    return served


def test_the_app_serves_exactly_the_declared_routes() -> None:
    from lmplatform.serving.ingress import api

    declared = {(route.method, route.path) for route in ROUTES} | {("GET", path) for path in PAGES.values()}
    served = _served(api)
    assert not served - declared, f"served but not declared in serving/routes.py: {served - declared}"
    assert not declared - served, f"declared but not served by the ingress: {declared - served}"


def _ref(content: dict[str, Any]) -> str:
    return content["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]


def test_openapi_documents_each_route_with_its_declared_models() -> None:
    from lmplatform.serving.ingress import api

    paths = api.openapi()["paths"]
    for route in ROUTES:
        operation = paths[route.path.replace(":path}", "}")][route.method.lower()]
        assert operation["tags"] == [route.tag], route
        assert _ref(operation["responses"]["200"]) == route.response.__name__, route
        body = _ref(operation["requestBody"]) if "requestBody" in operation else None
        assert body == (route.request.__name__ if route.request else None), route
        errors = {str(status) for status in ERROR_STATUSES} if route.path.startswith(API_PREFIX) else set()
        assert set(operation["responses"]) - {"200"} == errors, route


def test_a_handler_must_take_the_declared_body_and_have_a_declared_name() -> None:
    from lmplatform.serving.ingress import declared_route

    async def search(self: Any, body: TextsRequest) -> None: ...

    async def healthz(self: Any, body: SearchRequest) -> None: ...

    async def made_up(self: Any) -> None: ...

    for handler, refusal, words in [(search, TypeError, "declares POST /v1/search with SearchRequest"),
                                    (healthz, TypeError, "with no body"), (made_up, LookupError, "'made_up'")]:
        with pytest.raises(refusal, match=words):
            declared_route(handler)


def test_the_fuzz_covers_every_route_with_a_body_with_the_request_models_own_keys() -> None:
    with_body = [route for route in ROUTES if route.request is not None]
    assert set(hostile.fuzzed(live=False)) | set(hostile.fuzzed(live=True)) == set(with_body)
    for route in with_body:
        hostile.bodies(route)  # a request model without strategies raises here, naming it

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        route = data.draw(st.sampled_from(with_body))
        keys = set(data.draw(hostile.well_formed(route)))
        fields = route.request.model_fields
        assert keys <= set(fields), (route.path, keys - set(fields))
        assert {name for name, field in fields.items() if field.is_required()} <= keys, (route.path, keys)

    check()
