"""JSON answers serialised once, straight from what a route computed.

FastAPI answers a route that returns a pydantic model by validating it again against the route's
`response_model`, turning it into plain Python objects and encoding those with the standard json module;
for /v1/embed that is every float of every vector turned into a Python float, checked, then printed. A
route that returns a `Response` skips all of it (the OpenAPI schema still comes from `response_model`):
`model_json` writes an already validated model with pydantic's own serialiser, and `vectors_json` writes
numpy vectors with orjson directly from the array (float32 values, printed in their shortest form).
"""
from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel
from starlette.responses import Response

JSON = "application/json"


def model_json(model: BaseModel) -> Response:
    """`model` as the JSON body FastAPI would have sent for it, written once."""
    return Response(model.model_dump_json(), media_type=JSON)


def vectors_json(body: dict[str, Any]) -> Response:
    """`body` (plain values and numpy arrays, e.g. {"vectors": float32 array, "dim": 384}) as a JSON body."""
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type=JSON)
