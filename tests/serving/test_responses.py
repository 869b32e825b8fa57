"""JSON bodies written once (serving/responses.py) hold what FastAPI's own answer held."""
from __future__ import annotations

import json

import numpy as np
from fastapi.encoders import jsonable_encoder

from lmplatform.serving.responses import model_json, vectors_json
from lmplatform.serving.schemas import Hit, SearchResponse


def test_a_model_body_is_the_one_fastapi_would_send() -> None:
    response = SearchResponse(hits=[Hit(id="a", score=0.5, title="t", snippet="s…"), Hit(id="b", score=0.25, rerank_score=0.9)],
                              model_version="m/1", reranked=False, mode="hybrid", fusion="convex", bm25_weight=0.2)
    sent = model_json(response)
    assert sent.media_type == "application/json"
    assert json.loads(sent.body) == jsonable_encoder(response)  # nulls kept, as FastAPI keeps them


def test_vectors_are_written_from_the_array_and_read_back_exactly() -> None:
    vectors = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    body = json.loads(vectors_json({"vectors": vectors, "dim": 7, "model_version": "m/1"}).body)
    assert body["dim"] == 7 and body["model_version"] == "m/1"
    assert np.array_equal(np.asarray(body["vectors"], dtype=np.float32), vectors)  # every float32 bit kept
