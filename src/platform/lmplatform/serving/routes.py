"""The service's public routes, declared once; torch- and Ray-free, so metrics and tests import it cheaply.

Derived from `ROUTES`:
- the ingress registers each handler under its route (`ingress.declared_route`: path, method, models, tag),
  and refuses, when it is imported, a handler whose body is not the declared request model;
- the metrics' `route` label values (`metrics.route_label`), with FastAPI's own `PAGES`;
- the hostile-body fuzz's route lists (`tests/serving/hostile.py`);
- tests/serving/test_routes.py checks that the app serves exactly these routes, with these methods and models.

Adding a route: a `Route` here, and its handler in `ingress.ServeIngress` (named `name`, decorated
`@declared_route`). A request model no route took before also needs its hostile bodies in tests/serving/hostile.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel

from lmplatform.serving.schemas import (
    ClassifyResponse,
    DeletedResponse,
    DocumentResponse,
    DocumentsRequest,
    DocumentsResponse,
    DuplicatesRequest,
    DuplicatesResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbedResponse,
    ErrorResponse,
    HealthResponse,
    ModelInfo,
    SearchRequest,
    SearchResponse,
    SimilarityRequest,
    SimilarityResponse,
    TextsRequest,
)

# The versioned API: the bearer token when one is configured, bodies read as JSON whatever their Content-Type
# (`http_guard`), and answers documented with the error body of every 4xx/503.
API_PREFIX = "/v1/"
ERROR_STATUSES = (400, 401, 404, 413, 422, 503)
# FastAPI's own pages (its constructor's arguments): OpenAPI and the two documentation UIs.
PAGES = {"openapi_url": "/openapi.json", "docs_url": "/docs", "swagger_ui_oauth2_redirect_url": "/docs/oauth2-redirect",
         "redoc_url": "/redoc"}
# What answers without the bearer token: the health check and FastAPI's pages. Every other path needs it, under
# any route prefix (`http_guard`).
OPEN_PATHS = frozenset({"/healthz", *PAGES.values()})


def app_path(scope: Mapping[str, Any]) -> str:
    """A request's path as the app's routes match it: without the route prefix Serve mounts the app under (ASGI's
    `root_path`, which `path` includes)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return path[len(root.rstrip("/")):] or "/"
    return path


@dataclass(frozen=True)
class Route:
    """One public route.

    name: the handler's name in `ServeIngress`. path: as FastAPI matches it (`{doc_id:path}` takes slashes too).
    request: the model of the JSON body; None for a route that takes no body. tag: its OpenAPI group.
    live: answered only with live updates on (`live.dir` set); else a 404 naming them.
    """

    name: str
    method: Literal["GET", "POST", "DELETE"]
    path: str
    response: type[BaseModel]
    tag: str
    request: Optional[type[BaseModel]] = None
    live: bool = False

    @property
    def errors(self) -> dict[int, dict[str, Any]]:
        """The error answers OpenAPI documents for this route (FastAPI's `responses`)."""
        if not self.path.startswith(API_PREFIX):
            return {}
        return {status: {"model": ErrorResponse} for status in ERROR_STATUSES}


ROUTES: tuple[Route, ...] = (
    Route("healthz", "GET", "/healthz", HealthResponse, "service"),
    Route("model", "GET", "/v1/model", ModelInfo, "service"),
    Route("search", "POST", "/v1/search", SearchResponse, "retrieval", SearchRequest),
    Route("duplicates", "POST", "/v1/duplicates", DuplicatesResponse, "retrieval", DuplicatesRequest),
    Route("upsert_documents", "POST", "/v1/documents", DocumentsResponse, "documents", DocumentsRequest, live=True),
    Route("get_document", "GET", "/v1/documents/{doc_id:path}", DocumentResponse, "documents", live=True),
    Route("delete_document", "DELETE", "/v1/documents/{doc_id:path}", DeletedResponse, "documents", live=True),
    Route("classify", "POST", "/v1/classify", ClassifyResponse, "classification", TextsRequest),
    Route("embed", "POST", "/v1/embed", EmbedResponse, "embedding", TextsRequest),
    Route("embeddings", "POST", "/v1/embeddings", EmbeddingsResponse, "embedding", EmbeddingsRequest),
    Route("similarity", "POST", "/v1/similarity", SimilarityResponse, "embedding", SimilarityRequest),
)
_BY_NAME = {route.name: route for route in ROUTES}


def route_named(name: str) -> Route:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise LookupError(f"no route named {name!r} is declared in lmplatform/serving/routes.py "
                          f"(declared: {sorted(_BY_NAME)})") from None
