"""One real Serve application on 127.0.0.1 (started once for the module): endpoints, bad input, hot reload.

Models are tiny random BERTs registered in a sqlite MLflow in tmp; version 1 is a
plain encoder (width 32, classification by KNN over labelled documents), version 2
an encoder of width 48 with a trained-head folder. A reload between them changes
the vector width, so any request that mixed the two models would fail loudly.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.serving.servable import (
    LABELS, make_documents, register_with_index, write_classifier_model, write_index,
)

pytestmark = pytest.mark.ray

TOKEN = "s3cret-test-token"
APP = "lmp-test"
MODEL_NAME = "serving-test-encoder"


@dataclass
class Service:
    url: str
    client: httpx.Client
    tracking_uri: str
    documents: list[dict[str, str]]
    runs: dict[str, str]
    tmp: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def service(ray_session, tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from ray import serve

    from lmplatform.serving import control
    from lmplatform.serving.settings import ServeSettings, token_sha256

    tmp = tmp_path_factory.mktemp("serving")
    tracking_uri = f"sqlite:///{tmp / 'mlruns' / 'mlflow.db'}"
    (tmp / "mlruns").mkdir()
    documents = make_documents()
    v1 = register_with_index(tracking_uri, MODEL_NAME, tiny_bert, write_index(tiny_bert, documents, tmp / "index-v1"),
                             alias="champion")
    v2_dir = write_classifier_model(tmp / "model-v2")
    v2 = register_with_index(tracking_uri, MODEL_NAME, v2_dir, write_index(v2_dir, documents, tmp / "index-v2"))
    unlabelled = [{k: v for k, v in d.items() if k != "label"} for d in documents]
    v3 = register_with_index(tracking_uri, MODEL_NAME, tiny_bert, write_index(tiny_bert, unlabelled, tmp / "index-v3"))
    settings = ServeSettings(
        model=f"models:/{MODEL_NAME}@champion", tracking_uri=tracking_uri, reranker=str(tiny_bert),
        cache_dir=str(tmp / "cache"), auth_token_sha256=token_sha256(TOKEN), num_threads=1,
        limits={"max_k": 20, "max_texts": 4, "max_text_chars": 300, "max_query_chars": 200, "rerank_candidates": 8},
        batching={"max_batch_size": 8, "batch_wait_timeout_s": 0.002},
    )
    small = {"num_cpus": 0.1}  # five replicas beside everything else on 2 CPUs
    deployments = [{"name": d, "ray_actor_options": small} for d in
                   ("RetrieverDeployment", "ClassifierDeployment", "RerankerDeployment", "ServeIngress")]
    port = _free_port()
    control.start("127.0.0.1", port)
    control.deploy(control.application_config(settings, name=APP, deployments=deployments), timeout_s=240)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    yield Service(f"http://127.0.0.1:{port}", client, tracking_uri, documents,
                  {"1": v1.run_id, "2": v2.run_id, "3": v3.run_id}, tmp)
    client.close()
    serve.shutdown()  # frees the replicas' CPUs for later tests


def _error(response: httpx.Response, status: int, field: Optional[str]) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["field"] == field, body
    assert body["error"]
    return body


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _healthy(service: Service) -> None:
    response = service.client.post("/v1/search", json={"query": service.documents[0]["text"], "k": 1})
    assert response.status_code == 200, response.text
    assert response.json()["hits"][0]["id"] == service.documents[0]["id"]


def test_endpoints_answer_with_real_values(service: Service) -> None:
    client, docs = service.client, service.documents
    assert client.get("/healthz").json() == {"status": "ok"}

    info = _ok(client.get("/v1/model"))
    assert (info["registered_name"], info["version"], info["alias"]) == (MODEL_NAME, "1", "champion")
    assert info["mlflow_run_id"] == service.runs["1"]
    assert info["index_size"] == len(docs) and info["dim"] == 32 and info["index_kind"] == "flat"
    assert info["index_built_at"] and info["classifier"] == "knn" and info["reranker"]

    for doc in docs[:5]:  # a document's own text finds it first, with cosine ~1
        hits = _ok(client.post("/v1/search", json={"query": doc["text"], "k": 3}))["hits"]
        assert hits[0]["id"] == doc["id"] and hits[0]["score"] == pytest.approx(1.0, abs=1e-4)
        assert hits[0]["title"] == doc["title"] and doc["text"].startswith(hits[0]["snippet"].rstrip("…"))
        assert len(hits) == 3 and hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]

    reranked = _ok(client.post("/v1/search", json={"query": docs[0]["text"], "k": 5, "rerank": True}))
    assert reranked["reranked"] and len(reranked["hits"]) == 5
    scores = [h["score"] for h in reranked["hits"]]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert all(h["retrieval_score"] is not None for h in reranked["hits"])

    embedded = _ok(client.post("/v1/embed", json={"texts": [docs[0]["text"], docs[1]["text"]]}))
    assert embedded["dim"] == 32 and len(embedded["vectors"]) == 2
    assert sum(x * x for x in embedded["vectors"][0]) == pytest.approx(1.0, abs=1e-4)

    same = _ok(client.post("/v1/similarity", json={"a": docs[2]["text"], "b": docs[2]["text"]}))
    assert same["cosine"] == pytest.approx(1.0, abs=1e-4)
    other = _ok(client.post("/v1/similarity", json={"a": docs[2]["text"], "b": "payment refund invoice"}))
    assert other["cosine"] < same["cosine"]

    classified = _ok(client.post("/v1/classify", json={"texts": [d["text"] for d in docs[:3]]}))
    assert classified["method"] == "knn"
    for doc, prediction in zip(docs[:3], classified["predictions"]):
        assert set(prediction["probabilities"]) == set(LABELS)
        assert sum(prediction["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
        assert prediction["label"] == max(prediction["probabilities"], key=prediction["probabilities"].get)
    assert "/v1/search" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


BAD_REQUESTS = [
    ("/v1/search", {"query": "", "k": 3}, 422, "query"),
    ("/v1/search", {"query": "   \n\t", "k": 3}, 422, "query"),
    ("/v1/search", {"query": "vpn", "k": 0}, 422, "k"),
    ("/v1/search", {"query": "vpn", "k": -4}, 422, "k"),
    ("/v1/search", {"query": "vpn", "k": 21}, 422, "k"),
    ("/v1/search", {"query": "vpn", "k": "5"}, 422, "k"),
    ("/v1/search", {"query": "vpn", "k": 2.5}, 422, "k"),
    ("/v1/search", {"query": 42}, 422, "query"),
    ("/v1/search", {"query": ["vpn"]}, 422, "query"),
    ("/v1/search", {"query": "vpn", "rerank": "yes"}, 422, "rerank"),
    ("/v1/search", {"k": 3}, 422, "query"),
    ("/v1/search", {"query": "vpn", "colour": "red"}, 422, "colour"),
    ("/v1/search", {"query": "x" * 201}, 413, "query"),
    ("/v1/search", [1, 2], 422, "body"),
    ("/v1/embed", {"texts": []}, 422, "texts"),
    ("/v1/embed", {"texts": ["a", "b", "c", "d", "e"]}, 413, "texts"),
    ("/v1/embed", {"texts": ["fine", "y" * 301]}, 413, "texts[1]"),
    ("/v1/embed", {"texts": ["fine", " "]}, 422, "texts[1]"),
    ("/v1/embed", {"texts": "not a list"}, 422, "texts"),
    ("/v1/embed", {"texts": [1, 2]}, 422, "texts.0"),
    ("/v1/classify", {"texts": [None]}, 422, "texts.0"),
    ("/v1/classify", {"texts": ["z" * 301]}, 413, "texts[0]"),
    ("/v1/classify", {"text": ["a"]}, 422, "texts"),
    ("/v1/similarity", {"a": "vpn"}, 422, "b"),
    ("/v1/similarity", {"a": "", "b": "vpn"}, 422, "a"),
    ("/v1/similarity", {"a": "vpn", "b": {"nested": 1}}, 422, "b"),
]


def test_bad_input_gets_4xx_naming_the_field_and_the_service_survives(service: Service) -> None:
    client = service.client
    for path, body, status, field in BAD_REQUESTS:
        _error(client.post(path, json=body), status, field)
    for raw in (b"{not json", b"", b'{"query": "vpn", "k": 3', "ü".encode("latin-1")):
        response = client.post("/v1/search", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code in (400, 422) and response.json().get("field") == "body", (raw, response.text)
    text_body = client.post("/v1/search", content=b"query=vpn", headers={"Content-Type": "text/plain"})
    assert 400 <= text_body.status_code < 500 and text_body.json()["error"], text_body.text
    _error(client.post("/v1/nowhere", json={}), 404, None)
    big = client.post("/v1/embed", content=b'{"texts": ["' + b"a" * 1_100_000 + b'"]}',
                      headers={"Content-Type": "application/json"})
    _error(big, 413, "body")

    anonymous = httpx.post(f"{service.url}/v1/search", json={"query": "vpn"})
    _error(anonymous, 401, "authorization")
    wrong = httpx.post(f"{service.url}/v1/embed", json={"texts": ["vpn"]}, headers={"Authorization": "Bearer nope"})
    _error(wrong, 401, "authorization")
    assert httpx.get(f"{service.url}/healthz").status_code == 200  # health checks need no token
    _healthy(service)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**20, max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=8,
)
_bodies = st.one_of(
    _json,
    st.fixed_dictionaries({}, optional={"query": _json, "k": _json, "rerank": _json, "texts": _json}),
    st.fixed_dictionaries({"query": st.text(max_size=60), "k": st.integers(-3, 40)}, optional={"rerank": st.booleans()}),
    st.fixed_dictionaries({"texts": st.lists(st.text(max_size=60), max_size=6)}),
)


def test_random_json_bodies_never_get_a_5xx(service: Service) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(path=st.sampled_from(["/v1/search", "/v1/classify"]), body=_bodies)
    def check(path: str, body: object) -> None:
        response = service.client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert response.status_code < 500, (path, body, response.text)
        payload = response.json()
        assert ("error" in payload) == (response.status_code >= 400), payload

    check()
    _healthy(service)


def test_hot_reload_moves_to_the_new_champion_without_a_failed_request(service: Service) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.serving import control

    docs = service.documents
    outcomes: list[tuple[int, str, str]] = []
    stop = threading.Event()

    def client_loop() -> None:
        with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
            n = 0
            while not stop.is_set():
                doc = docs[n % len(docs)]
                kind = ("search", "embed", "classify")[n % 3]
                if kind == "search":
                    response = client.post("/v1/search", json={"query": doc["text"], "k": 2})
                    ok = response.status_code == 200 and response.json()["hits"][0]["id"] == doc["id"]
                elif kind == "embed":
                    response = client.post("/v1/embed", json={"texts": [doc["text"]]})
                    ok = response.status_code == 200 and response.json()["dim"] in (32, 48)
                else:
                    response = client.post("/v1/classify", json={"texts": [doc["text"]]})
                    ok = response.status_code == 200
                version = response.json().get("model_version", "") if response.status_code == 200 else ""
                outcomes.append((response.status_code if ok else -response.status_code, kind, version))
                n += 1

    MlflowClient(service.tracking_uri).set_registered_model_alias(MODEL_NAME, "champion", "2")
    thread = threading.Thread(target=client_loop, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)
        result = control.reload(APP, timeout_s=180)
        deadline = time.monotonic() + 30
        while not any(v.startswith(f"{MODEL_NAME}/2") for _, _, v in outcomes) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(timeout=60)

    assert result.changed and result.previous == f"{MODEL_NAME}/1" and result.current == f"{MODEL_NAME}/2"
    failed = [o for o in outcomes if o[0] != 200]
    assert len(outcomes) > 10, outcomes  # the loop really ran across the reload
    assert not failed, f"{len(failed)} of {len(outcomes)} requests failed during the reload: {failed[:5]}"
    versions = [v for _, _, v in outcomes]
    assert versions[0] == f"{MODEL_NAME}/1" and versions[-1] == f"{MODEL_NAME}/2"
    first_new = versions.index(f"{MODEL_NAME}/2")
    assert all(v == f"{MODEL_NAME}/2" for v in versions[first_new:])  # no request went back to the old model

    info = _ok(service.client.get("/v1/model"))
    assert (info["version"], info["mlflow_run_id"], info["dim"]) == ("2", service.runs["2"], 48)
    assert info["classifier"] == "head"
    assert _ok(service.client.post("/v1/classify", json={"texts": [docs[0]["text"]]}))["method"] == "head"
    _healthy(service)
    from typer.testing import CliRunner

    from lmplatform.cli import app as lmp

    runner = CliRunner()
    reloaded = runner.invoke(lmp, ["serve", "reload", "--name", APP])  # the alias has not moved again
    assert reloaded.exit_code == 0 and "nothing to reload" in reloaded.output, reloaded.output
    shown = runner.invoke(lmp, ["serve", "status", "--name", APP])
    assert shown.exit_code == 0, shown.output
    status = json.loads(shown.stdout)
    assert status["status"] == "RUNNING" and status["release"]["version"] == "2"
    assert status["deployments"]["RetrieverDeployment"]["replicas"] == 1
    assert status["direct_ingress"] == []  # the test Ray runs Serve behind its proxy
    missing = runner.invoke(lmp, ["serve", "status", "--name", "no-such-app"])
    assert missing.exit_code == 2 and "no Serve application named 'no-such-app'" in missing.output


def test_a_model_without_head_or_labels_refuses_classification_but_still_searches(service: Service) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.serving import control

    MlflowClient(service.tracking_uri).set_registered_model_alias(MODEL_NAME, "champion", "3")
    assert control.reload(APP, timeout_s=180).current == f"{MODEL_NAME}/3"
    info = _ok(service.client.get("/v1/model"))
    assert (info["version"], info["dim"], info["classifier"]) == ("3", 32, "unavailable")
    refused = service.client.post("/v1/classify", json={"texts": ["vpn tunnel down"]})
    assert refused.status_code == 404 and "no labels" in refused.json()["error"], refused.text
    _healthy(service)
