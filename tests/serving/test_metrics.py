"""The metrics' route label, without Ray: every route of the app has its own series, anything else shares one."""
from __future__ import annotations

from lmplatform.serving.metrics import ROUTES, route_label


def test_every_route_of_the_app_is_a_label_and_made_up_paths_are_other() -> None:
    from lmplatform.serving.ingress import api

    paths = set(api.openapi()["paths"]) | {route.path for route in api.routes if hasattr(route, "path")}
    assert "/v1/embeddings" in paths and "/docs" in paths
    assert paths <= ROUTES, paths - ROUTES  # a new route needs its label, or it is counted as "other"
    assert route_label({"path": "/v1/embeddings"}) == "/v1/embeddings"
    assert route_label({"path": "/v1/documents/r-17"}) == route_label({"path": "/v1/documents/a/b"}) == "/v1/documents/{doc_id}"
    assert route_label({"path": "/api/v1/search", "root_path": "/api"}) == "/v1/search"  # behind a route_prefix
    assert route_label({"path": "/v1/search/../../etc/passwd"}) == route_label({"path": "/wp-admin"}) == "other"
