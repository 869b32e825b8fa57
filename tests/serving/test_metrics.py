"""The metrics' route label, without Ray: every declared route has its own series, anything else shares one."""
from __future__ import annotations

import re

from lmplatform.serving.metrics import ROUTE_LABELS, route_label
from lmplatform.serving.routes import PAGES, ROUTES


def test_every_declared_route_is_a_label_and_made_up_paths_are_other() -> None:
    paths = [*PAGES.values(), *(route.path for route in ROUTES)]
    requested = {route_label({"path": re.sub(r"\{[^}]*\}", "r-17", path)}) for path in paths}  # parameters filled in
    assert requested == ROUTE_LABELS and "other" not in requested
    assert len(ROUTE_LABELS) == len(set(paths))  # one series per path, whatever its methods
    assert route_label({"path": "/v1/embeddings"}) == "/v1/embeddings"
    assert route_label({"path": "/v1/documents/r-17"}) == route_label({"path": "/v1/documents/a/b"}) == "/v1/documents/{doc_id}"
    assert route_label({"path": "/api/v1/search", "root_path": "/api"}) == "/v1/search"  # behind a route_prefix
    assert route_label({"path": "/v1/search/../../etc/passwd"}) == route_label({"path": "/wp-admin"}) == "other"
