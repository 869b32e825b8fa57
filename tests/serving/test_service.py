"""One real Serve application on 127.0.0.1 (started once for the module): endpoints, bad input, hot reload.

Models are tiny random BERTs registered in a sqlite MLflow in tmp; version 1 is a
plain encoder (width 32, classification by KNN over labelled documents), version 2
an encoder of width 48 with a trained-head folder. A reload between them changes
the vector width, so any request that mixed the two models would fail loudly.
The retriever and the classifier run 2 replicas each, so a reload must reach both.
"""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from lmplatform.models.encoder import Encoder
from lmplatform.retrieval.metadata_fusion import MetadataFusion
from lmplatform.retrieval.settings import MetadataFusionConfig, SearchSettings
from lmplatform.serving.routes import Route
from lmplatform.testing.local_cluster import free_port
from lmplatform.testing.registered import register_with_index
from lmplatform.tracking.registry import register_search_settings
from tests.conftest import new_mlflow_store
from tests.serving import hostile
from tests.serving.scrape import metric_reaches, samples
from tests.serving.servable import (
    DAY,
    LABELS,
    QUICK_STOP,
    make_documents,
    write_classifier_model,
    write_cross_encoder,
    write_index,
)

TOKEN = "s3cret-test-token"
APP = "lmp-test"
MODEL_NAME = "serving-test-encoder"
MODEL_DEPLOYMENTS = ("RetrieverDeployment", "ClassifierDeployment")
MAX_BODY_BYTES = 400_000  # a 100,000-character report with room, and small enough to send ten times over
MAX_REPORT_CHARS = 120_000  # queries and reports: beyond a real report's 100,000 characters, cheap to send past
# A metadata fusion as a fit would leave it (same product and component count, so does being filed close in time).
FUSION = MetadataFusion(MetadataFusionConfig(pool=10), np.array([1.0, 0.5, 0.2, 0.6, 0.4, -0.3, 0.1, -0.2]), 0.05)
V1_SEARCH = SearchSettings(bm25_weight=0.3, hybrid_candidates=10, rerank_depth=20, metadata_fusion=FUSION.to_dict())


@dataclass
class Service:
    url: str
    client: httpx.Client
    tracking_uri: str
    documents: list[dict[str, str]]
    runs: dict[str, str]
    tmp: Path
    model_dir: Path  # version 1, the champion at the start
    reranker: Path  # the cross-encoder the service deploys


@pytest.fixture(scope="module")
def service(ray_session, tiny_bert: Path, mlflow_template: Path, tmp_path_factory: pytest.TempPathFactory):
    from ray import serve

    from lmplatform.serving import control
    from lmplatform.serving.settings import ServeSettings, token_sha256

    tmp = tmp_path_factory.mktemp("serving")
    tracking_uri = new_mlflow_store(mlflow_template, tmp / "mlruns")
    documents = make_documents()
    v1 = register_with_index(tracking_uri, MODEL_NAME, tiny_bert, write_index(tiny_bert, documents, tmp / "index-v1"),
                             alias="champion")
    v2_dir = write_classifier_model(tmp / "model-v2")
    v2 = register_with_index(tracking_uri, MODEL_NAME, v2_dir, write_index(v2_dir, documents, tmp / "index-v2"))
    unlabelled = [{k: v for k, v in d.items() if k != "label"} for d in documents]
    v3 = register_with_index(tracking_uri, MODEL_NAME, tiny_bert,  # an index built --no-bm25: dense search only
                             write_index(tiny_bert, unlabelled, tmp / "index-v3", bm25=False))
    # The champion's search settings: dense by default; hybrid requests fuse with these, over a pool smaller than the corpus.
    register_search_settings(tracking_uri, MODEL_NAME, v1.version, V1_SEARCH)
    reranker = write_cross_encoder(tiny_bert, tmp / "reranker")
    settings = ServeSettings(
        model=f"models:/{MODEL_NAME}@champion", tracking_uri=tracking_uri, reranker=str(reranker),
        cache_dir=str(tmp / "cache"), auth_token_sha256=token_sha256(TOKEN), num_threads=1,
        encoder={"backend": "onnx"},  # the torch backend is served in tests/cluster (the shipped config)
        limits={"max_k": 20, "max_texts": 4, "max_text_chars": 300, "max_query_chars": MAX_REPORT_CHARS,
                "max_document_chars": MAX_REPORT_CHARS, "rerank_candidates": 8, "max_body_bytes": MAX_BODY_BYTES},
        batching={"max_batch_size": 8, "batch_wait_timeout_s": 0.002},
    )
    small = {"num_cpus": 0.1}  # six replicas beside everything else on 2 CPUs
    deployments = [{"name": d, "ray_actor_options": small, "num_replicas": 2 if d in MODEL_DEPLOYMENTS else 1, **QUICK_STOP}
                   for d in ("RetrieverDeployment", "ClassifierDeployment", "RerankerDeployment", "ServeIngress")]
    port = free_port()
    control.start("127.0.0.1", port)
    control.deploy(control.application_config(settings, name=APP, deployments=deployments), timeout_s=240)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    yield Service(f"http://127.0.0.1:{port}", client, tracking_uri, documents,
                  {"1": v1.run_id, "2": v2.run_id, "3": v3.run_id}, tmp, tiny_bert, reranker)
    client.close()
    serve.shutdown()  # frees the replicas' CPUs for later tests


def _error(response: httpx.Response, status: int, field: Optional[str]) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["field"] == field, body
    assert body["error"]
    return body


def _post(client: httpx.Client, path: str, body: object, content_type: Optional[str] = "application/json") -> httpx.Response:
    """POST `body` as JSON bytes: json.dumps escapes lone surrogates (httpx's json= would fail to encode them)."""
    headers = {"Content-Type": content_type} if content_type else {}
    return client.post(path, content=json.dumps(body).encode("ascii"), headers=headers)


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
    assert info["hybrid"] and info["search"] == V1_SEARCH.model_dump()

    for doc in docs[:5]:  # a document's own text finds it first, with cosine ~1
        hits = _ok(client.post("/v1/search", json={"query": doc["text"], "k": 3}))["hits"]
        assert hits[0]["id"] == doc["id"] and hits[0]["score"] == pytest.approx(1.0, abs=1e-4)
        assert hits[0]["title"] == doc["title"] and doc["text"].startswith(hits[0]["snippet"].rstrip("…"))
        assert len(hits) == 3 and hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]

    reranked = _ok(client.post("/v1/search", json={"query": docs[0]["text"], "k": 5, "rerank": True}))
    assert reranked["reranked"] and len(reranked["hits"]) == 5 and reranked["mode"] == "dense"
    scores = [h["score"] for h in reranked["hits"]]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert all(h["retrieval_score"] is not None and 0.0 <= h["rerank_score"] <= 1.0 for h in reranked["hits"])

    embedded = _ok(client.post("/v1/embed", json={"texts": [docs[0]["text"], docs[1]["text"]]}))
    assert embedded["dim"] == 32 and len(embedded["vectors"]) == 2
    assert sum(x * x for x in embedded["vectors"][0]) == pytest.approx(1.0, abs=1e-4)
    # The replicas run the ONNX backend: its vectors are the PyTorch encoder's.
    assert info["encoder_backend"] == "onnx"
    torch_vectors = Encoder.from_pretrained(service.model_dir).encode([docs[0]["text"], docs[1]["text"]])
    assert np.abs(np.asarray(embedded["vectors"]) - torch_vectors).max() < 1e-5

    same = _ok(client.post("/v1/similarity", json={"a": docs[2]["text"], "b": docs[2]["text"]}))
    assert same["cosine"] == pytest.approx(1.0, abs=1e-4)
    other = _ok(client.post("/v1/similarity", json={"a": docs[2]["text"], "b": "payment refund invoice"}))
    assert other["cosine"] < same["cosine"]

    classified = _ok(client.post("/v1/classify", json={"texts": [d["text"] for d in docs[:3]]}))
    assert classified["method"] == "knn"
    for _doc, prediction in zip(docs[:3], classified["predictions"]):
        assert set(prediction["probabilities"]) == set(LABELS)
        assert sum(prediction["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
        assert prediction["label"] == max(prediction["probabilities"], key=prediction["probabilities"].get)
    assert "/v1/search" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


def _assert_same_ranking(served: list[dict], offline: list[tuple[str, float]], tolerance: float = 1e-5) -> None:
    """Equal ids and scores; two processes' models may differ in the last float bits, so only hits whose
    scores are within `tolerance` of each other may trade places."""
    assert [h["score"] for h in served] == pytest.approx([s for _, s in offline], abs=tolerance)
    for n, (hit, (doc_id, score)) in enumerate(zip(served, offline)):
        if hit["id"] != doc_id:
            assert [d for d, s in offline if abs(s - score) < tolerance and d == hit["id"]], (n, served, offline)


def test_served_hybrid_search_ranks_as_the_offline_hybrid_retriever(service: Service) -> None:
    from lmplatform.models.cross_encoder import CrossEncoder
    from lmplatform.retrieval.retrievers import DenseRetriever, HybridRetriever, TwoStageRetriever

    client, docs = service.client, service.documents
    # The replicas' encoder backend (ONNX), so both sides embed alike; the index holds the documents' texts.
    offline = HybridRetriever(DenseRetriever(Encoder.from_pretrained(service.model_dir, backend="onnx")))
    offline.index([d["id"] for d in docs], [d["text"] for d in docs])
    queries = ["vpn tunnel timeout at the gateway", "refund the card payment", docs[4]["text"], "disk quota snapshot case 7"]
    hybrid_requests = 0
    for query in queries:
        for weight in (None, 0.0, 0.45, 1.0):
            body = {"query": query, "k": 8, "mode": "hybrid"} | ({} if weight is None else {"bm25_weight": weight})
            served = _ok(client.post("/v1/search", json=body))
            hybrid_requests += 1
            used = V1_SEARCH.bm25_weight if weight is None else weight  # the registered weight by default
            assert ((served["mode"], served["fusion"], served["bm25_weight"], served["reranked"])
                    == ("hybrid", "convex", used, False))
            offline.settings = V1_SEARCH.fusion_settings().model_copy(update={"bm25_weight": used})
            _assert_same_ranking(served["hits"], offline.search([query], 8)[0])
        dense = _ok(client.post("/v1/search", json={"query": query, "k": 8}))  # the registered default mode
        assert (dense["mode"], dense["fusion"], dense["bm25_weight"]) == ("dense", None, None)
        at_zero = _ok(client.post("/v1/search", json={"query": query, "k": 8, "mode": "hybrid", "bm25_weight": 0}))
        hybrid_requests += 1
        assert [h["id"] for h in at_zero["hits"]] == [h["id"] for h in dense["hits"]]
        # Left-out ids are left out before the pool is fused and the top k cut, as the offline search leaves them out.
        drop = {h["id"] for h in dense["hits"][:2]}
        offline.settings = V1_SEARCH.fusion_settings()
        served = _ok(client.post("/v1/search", json={"query": query, "k": 8, "mode": "hybrid", "exclude_ids": sorted(drop)}))
        hybrid_requests += 1
        _assert_same_ranking(served["hits"], offline.search([query], 8, exclude=[drop])[0])
        kept = _ok(client.post("/v1/search", json={"query": query, "k": 6, "exclude_ids": sorted(drop)}))
        assert [h["id"] for h in kept["hits"]] == [h["id"] for h in dense["hits"] if h["id"] not in drop][:6]

    # Re-ranked hybrid: the registered rerank_depth (20) of the fused list, re-scored by the same cross-encoder. Its
    # random head spreads the scores over ~1e-3 only, which min-max scales to [0, 1]: float noise between the
    # replica (batches of 8 pairs, 1 thread) and this process grows to ~1e-4 there, hence the wider tolerance.
    offline.settings = V1_SEARCH.fusion_settings()
    two_stage = TwoStageRetriever(offline, CrossEncoder.from_pretrained(service.reranker), candidates=V1_SEARCH.rerank_depth,
                                  rerank_weight=V1_SEARCH.rerank_weight)
    two_stage.texts = {d["id"]: f"{d['title']}. {d['text']}" for d in docs}  # what the service re-ranks: title and text
    for query in queries[:2]:
        served = _ok(client.post("/v1/search", json={"query": query, "k": 6, "mode": "hybrid", "rerank": True}))
        hybrid_requests += 1
        assert served["reranked"] and served["mode"] == "hybrid"
        _assert_same_ranking(served["hits"], two_stage.search([query], 6)[0], tolerance=1e-3)
    metric_reaches("lmp_searches_total", hybrid_requests, mode="hybrid")


def test_served_metadata_search_ranks_as_the_offline_fusion(service: Service) -> None:
    """mode 'metadata': the registered fusion over the dense and BM25 pool, with the request's metadata and the
    documents' from the store, ranks as `metadata_search` does offline (the function a bench scores with)."""
    from lmplatform.retrieval.index import VectorIndex
    from lmplatform.retrieval.retrievers import BM25Retriever, metadata_search

    client, docs = service.client, service.documents
    ids, texts = [d["id"] for d in docs], [d["text"] for d in docs]
    encoder = Encoder.from_pretrained(service.model_dir, backend="onnx")
    index = VectorIndex.build(ids, encoder.encode(texts), kind="flat")
    bm25 = BM25Retriever()
    bm25.index(ids, texts)
    stored = {d["id"]: d["metadata"] for d in docs}
    asks = [("vpn tunnel timeout at the gateway", {"product": "gateway", "component": "network", "created": 9 * 86_400}, []),
            ("refund the card payment", {"product": "ledger", "created": "1970-01-20T00:00:00+00:00"}, ["doc-2"]),
            (docs[4]["text"], {}, [docs[4]["id"]])]
    for query, metadata, drop in asks:
        served = _ok(client.post("/v1/search", json={"query": query, "k": 8, "mode": "metadata", "metadata": metadata,
                                                     "exclude_ids": drop}))
        assert (served["mode"], served["fusion"], served["bm25_weight"]) == ("metadata", None, None)
        (offline,) = metadata_search(index, bm25, stored.__getitem__, encoder.encode([query]), [query], [metadata], 8, FUSION,
                                     [set(drop)])
        _assert_same_ranking(served["hits"], offline)
    # the metadata moves the ranking: the same query without it ranks otherwise
    plain = _ok(client.post("/v1/search", json={"query": asks[0][0], "k": 8, "mode": "metadata"}))
    with_it = _ok(client.post("/v1/search", json={"query": asks[0][0], "k": 8, "mode": "metadata", "metadata": asks[0][1]}))
    assert [h["score"] for h in plain["hits"]] != [h["score"] for h in with_it["hits"]]
    metric_reaches("lmp_searches_total", len(asks) + 2, mode="metadata")


def _long_report(words: str, n: int = 100_000) -> str:
    """A real report's length: its words, then a stack trace and a log that run to `n` characters."""
    trace = "".join(f"\n  at org.openoffice.Writer.save(Save.java:{line}) gateway timeout packet {line}" for line in range(2000))
    return (words + " " + trace)[:n]


def test_a_long_report_is_searched_whole_and_its_duplicates_rank_as_its_search(service: Service) -> None:
    """/v1/duplicates answers what /v1/search answers for the report's title and text (joined as the index joins them),
    its metadata and its id excluded, in every mode; a 100,000-character report goes through both."""
    from lmplatform.data.fields import join_fields

    client, docs = service.client, service.documents
    long = _long_report(docs[4]["text"])
    assert len(long) == 100_000
    for mode in ("dense", "hybrid", "metadata"):
        hits = _ok(client.post("/v1/search", json={"query": long, "k": 5, "mode": mode}))["hits"]
        assert len(hits) == 5, mode

    reports = [{"id": docs[4]["id"], "title": docs[4]["title"], "text": docs[4]["text"], "metadata": docs[4]["metadata"]},
               {"title": "save fails", "text": long, "metadata": {"product": "gateway", "created": 9 * 86_400}},
               {"id": "not-in-the-index", "text": "refund the card payment invoice"}]
    for report in reports:
        for mode in ("dense", "hybrid", "metadata"):
            found = _ok(client.post("/v1/duplicates", json={"report": report, "k": 6, "mode": mode}))
            search = {"query": join_fields(report, ["title", "text"]), "k": 6, "mode": mode,
                      "metadata": report.get("metadata", {}), "exclude_ids": [report["id"]] if "id" in report else []}
            searched = _ok(client.post("/v1/search", json=search))
            assert found.pop("seq") is None and {k: v for k, v in found.items() if k != "hits"} == {
                k: v for k, v in searched.items() if k != "hits"}
            _assert_same_ranking(found["hits"], [(h["id"], h["score"]) for h in searched["hits"]])
            assert len(found["hits"]) == 6 and report.get("id") not in {h["id"] for h in found["hits"]}, (mode, found)
    # the report's own document is what its text finds first, when its id is not sent
    anonymous = {k: v for k, v in reports[0].items() if k != "id"}
    assert _ok(client.post("/v1/duplicates", json={"report": anonymous, "k": 1}))["hits"][0]["id"] == docs[4]["id"]

    _error(client.post("/v1/duplicates", json={"report": reports[0], "add": True}), 422, "add")  # read-only
    _error(client.post("/v1/duplicates", json={"report": reports[1], "add": True}), 422, "report.id")
    _error(client.post("/v1/duplicates", json={"report": {"text": "x" * (MAX_REPORT_CHARS + 1)}}), 413, "report.text")
    _error(client.post("/v1/duplicates", json={"report": {"title": "t" * (MAX_REPORT_CHARS + 1), "text": "x"}}),
           413, "report.title")
    _error(client.post("/v1/duplicates", json={"report": {"text": "vpn", "metadata": {"created": "soon"}},
                                                "mode": "metadata"}), 422, "report.metadata.created")
    _error(client.post("/v1/duplicates", json={"report": {"text": "vpn"}, "k": 21}), 422, "k")
    _error(client.post("/v1/duplicates", json={"query": "vpn"}), 422, "report")
    _error(client.post("/v1/duplicates", json={"report": {"text": "vpn", "colour": "red"}}), 422, "report.colour")
    # The fusion reads product, component and created: every fifth document was filed without a time.
    assert _ok(client.get("/v1/model"))["metadata_unknown"] == {"product": 0, "component": 0, "created": len(docs) // 5 + 1}


def test_a_time_window_searches_only_the_reports_filed_inside_it(service: Service) -> None:
    """filed_after/filed_before (any tracker time format) and /v1/duplicates' window_days leave out every document
    filed outside the window, and those of unknown time, in every mode, and still give k hits when the window holds
    them. Document i was filed on day i, every fifth without a time."""
    client, docs = service.client, service.documents
    inside = {d["id"] for d in docs if 10 * DAY <= d["metadata"].get("created", -1) <= 20 * DAY}
    assert len(inside) == 8
    for mode in ("dense", "hybrid", "metadata"):
        for after in (10 * DAY, "1970-01-11T00:00:00Z", "11/Jan/70 00:00"):
            body = {"query": docs[12]["text"], "k": 20, "mode": mode, "filed_after": after, "filed_before": 20 * DAY}
            hits = _ok(client.post("/v1/search", json=body))["hits"]
            assert {h["id"] for h in hits} == inside, (mode, after)
            assert hits[0]["id"] == docs[12]["id"] and [h["score"] for h in hits] == sorted([h["score"] for h in hits],
                                                                                          reverse=True)
        report = {"id": docs[12]["id"], "text": docs[12]["text"], "metadata": docs[12]["metadata"]}
        found = _ok(client.post("/v1/duplicates", json={"report": report, "k": 20, "mode": mode, "window_days": 5}))
        assert {h["id"] for h in found["hits"]} == {"doc-7", "doc-8", "doc-9", "doc-11"}, mode  # doc-10: no time
        few = _ok(client.post("/v1/search", json={"query": docs[12]["text"], "k": 3, "mode": mode, "filed_after": 10 * DAY}))
        assert len(few["hits"]) == 3 and all(h["id"] in {d["id"] for d in docs[10:] if d["metadata"].get("created")}
                                             for h in few["hits"])

    _error(client.post("/v1/search", json={"query": "vpn", "filed_after": "soon"}), 422, "filed_after")
    _error(client.post("/v1/search", json={"query": "vpn", "min_seq": 1}), 422, "min_seq")  # read-only: no seqs
    assert _ok(client.post("/v1/search", json={"query": "vpn"}))["as_of_seq"] is None
    _error(client.post("/v1/search", json={"query": "vpn", "filed_after": 5, "filed_before": 1}), 422, "filed_before")
    _error(client.post("/v1/duplicates", json={"report": {"text": "vpn"}, "window_days": 365}), 422,
           "report.metadata.created")
    _error(client.post("/v1/duplicates", json={"report": {"text": "vpn", "metadata": {"created": 1}}, "window_days": 0}),
           422, "window_days")


def test_openai_embeddings_route_answers_what_the_openai_sdk_sends(service: Service) -> None:
    """The request of `OpenAI(base_url=.../v1).embeddings.create(input=[...], model=...)`, byte for byte in shape:
    the SDK asks for base64 unless told otherwise and decodes it as little-endian float32."""
    import base64

    texts = [service.documents[0]["text"], service.documents[4]["text"]]
    sdk_headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "OpenAI/Python 1.99.0", "X-Stainless-Lang": "python"}
    body = {"input": texts, "model": "text-embedding-3-small", "encoding_format": "base64"}
    with httpx.Client(base_url=f"{service.url}/v1", timeout=60) as sdk:  # the SDK's base_url ends in /v1
        answer = _ok(sdk.post("/embeddings", content=json.dumps(body).encode(), headers=sdk_headers))
    assert answer["object"] == "list" and answer["model"] == f"{MODEL_NAME}/1"
    assert [(d["object"], d["index"]) for d in answer["data"]] == [("embedding", 0), ("embedding", 1)]
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in answer["data"]])
    ours = np.asarray(_ok(service.client.post("/v1/embed", json={"texts": texts}))["vectors"])
    assert decoded.shape == (2, 32) and np.abs(decoded - ours).max() < 1e-6

    tokens = Encoder.from_pretrained(service.model_dir).token_counts(texts)
    assert answer["usage"] == {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)} and min(tokens) > 2

    single = _ok(service.client.post("/v1/embeddings", json={"input": texts[0], "model": "any", "user": "u-1"}))
    assert len(single["data"]) == 1 and np.abs(np.asarray(single["data"][0]["embedding"]) - ours[0]).max() < 1e-6
    same_width = _ok(service.client.post("/v1/embeddings", json={"input": texts, "model": "m", "dimensions": 32}))
    assert [len(d["embedding"]) for d in same_width["data"]] == [32, 32]
    assert service.client.get("/openapi.json").json()["paths"]["/v1/embeddings"]["post"]


def test_metrics_count_requests_batches_the_index_and_the_served_version(service: Service) -> None:
    """Requests of a route and status no other test of this app has sent yet, so their counts are known exactly (the
    session's earlier Serve apps may have left series of their own on the same nodes: counted by `application`)."""
    for _ in range(3):
        assert httpx.post(f"{service.url}/v1/embeddings", json={"input": "x", "model": "m"}).status_code == 401
    _ok(service.client.post("/v1/embeddings", json={"input": ["vpn down", "disk full"], "model": "m"}))  # one batch at least
    for path in ("/v1/made-up", "/v1/another-made-up"):
        assert service.client.post(path, json={}).status_code == 404
    page = metric_reaches("lmp_requests_total", 3, route="/v1/embeddings", status="401", application=APP)
    page = metric_reaches("lmp_requests_total", 2, route="other", status="404", application=APP)
    assert sum(samples(page, "lmp_requests_total", route="/v1/embeddings", status="401", method="POST", application=APP)) == 3
    assert sum(samples(page, "lmp_requests_total", route="other", status="404", application=APP)) == 2  # one series
    assert not samples(page, "lmp_requests_total", route="/v1/made-up")
    answered = sum(samples(page, "lmp_requests_total", route="/v1/embeddings"))
    assert sum(samples(page, "lmp_request_latency_ms_count", route="/v1/embeddings")) == answered > 3
    assert sum(samples(page, "lmp_request_latency_ms_bucket", route="/v1/embeddings", le="+Inf")) == answered

    # Batches: counted in both histograms; the two-text request of this test fell in a bucket above 1 text.
    page = metric_reaches("lmp_batch_texts_count", 1, method="embed")
    batches = sum(samples(page, "lmp_batch_texts_count", method="embed"))
    assert batches == sum(samples(page, "lmp_batch_requests_count", method="embed")) > 0
    assert sum(samples(page, "lmp_batch_texts_bucket", method="embed", le="1.0")) < batches
    page = metric_reaches("lmp_index_documents", 1, release=f"{MODEL_NAME}/1")
    assert set(samples(page, "lmp_index_documents", release=f"{MODEL_NAME}/1")) == {len(service.documents)}
    page = metric_reaches("lmp_model_info", 1, release=f"{MODEL_NAME}/1")
    assert samples(page, "lmp_model_info", registered_name=MODEL_NAME, model_version="1", alias="champion") == [1.0]


def test_access_lines_go_to_the_replica_log_files_not_the_console(service: Service) -> None:
    """A request with its own id: its access line is in the replicas' Serve log files, and in no worker's
    stdout/stderr, which is what Ray copies to the console."""
    import uuid

    import ray

    request_id = uuid.uuid4().hex
    _ok(service.client.post("/v1/embed", json={"texts": ["vpn down"]}, headers={"X-Request-ID": request_id}))
    logs = Path(ray._private.worker._global_node.get_logs_dir_path())

    def holding(pattern: str) -> list[Path]:
        return [p for p in logs.glob(pattern) if request_id in p.read_text(errors="replace")]

    while len(holding("serve/replica_*.log")) < 2:  # the ingress's and the retriever's line
        time.sleep(0.2)
    assert not holding("worker-*.out") and not holding("worker-*.err")
    # The replicas' other lines still reach the console (their stderr), e.g. the retriever's release load.
    assert any("retriever: loaded release" in p.read_text(errors="replace") for p in logs.glob("worker-*.err"))


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
    ("/v1/search", {"query": "x" * (MAX_REPORT_CHARS + 1)}, 413, "query"),
    ("/v1/search", [1, 2], 422, "body"),
    ("/v1/search", {"query": "vpn", "mode": "sparse"}, 422, "mode"),
    ("/v1/search", {"query": "vpn", "mode": ["hybrid"]}, 422, "mode"),
    ("/v1/search", {"query": "vpn", "mode": "hybrid", "bm25_weight": 1.5}, 422, "bm25_weight"),
    ("/v1/search", {"query": "vpn", "mode": "hybrid", "bm25_weight": -0.1}, 422, "bm25_weight"),
    ("/v1/search", {"query": "vpn", "mode": "hybrid", "bm25_weight": "0.2"}, 422, "bm25_weight"),
    ("/v1/search", {"query": "vpn", "mode": "hybrid", "bm25_weight": True}, 422, "bm25_weight"),
    ("/v1/search", {"query": "vpn", "mode": "hybrid", "bm25_weight": float("nan")}, 422, "bm25_weight"),
    ("/v1/search", {"query": "vpn", "bm25_weight": 0.5}, 422, "bm25_weight"),  # the champion searches dense by default
    ("/v1/search", {"query": "vpn", "mode": "metadata", "metadata": {"created": "last tuesday"}}, 422, "metadata.created"),
    ("/v1/search", {"query": "vpn", "mode": "metadata", "metadata": {"product": ["gateway"]}}, 422, "metadata.product"),
    ("/v1/search", {"query": "vpn", "metadata": "gateway"}, 422, "metadata"),
    ("/v1/search", {"query": "vpn", "exclude_ids": "d1"}, 422, "exclude_ids"),
    ("/v1/search", {"query": "vpn", "exclude_ids": [7]}, 422, "exclude_ids.0"),
    ("/v1/search", {"query": "vpn", "exclude_ids": [f"d{i}" for i in range(101)]}, 413, "exclude_ids"),
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
    # Lone UTF-16 surrogates (valid JSON escapes, not valid Unicode): refused before any tokenizer.
    ("/v1/search", {"query": "vpn \ud800 down"}, 422, "query"),
    ("/v1/embed", {"texts": ["fine", "\udfff"]}, 422, "texts.1"),
    ("/v1/classify", {"texts": ["a\udbff"]}, 422, "texts.0"),
    ("/v1/similarity", {"a": "\ud83d", "b": "vpn"}, 422, "a"),
    ("/v1/similarity", {"a": "vpn", "b": "\udc00x"}, 422, "b"),
    ("/v1/search", {"query": "vpn", "\ud800": 1}, 422, "body"),  # pydantic cannot read the key: the body is named
    ("/v1/search", {"query": "vpn", "k": float("nan")}, 422, "k"),
    ("/v1/search", {"query": "vpn", "k": float("inf")}, 422, "k"),
    ("/v1/search", {"query": "vpn", "k": 10**30}, 422, "k"),
    ("/v1/search", {"query": float("-inf")}, 422, "query"),
    ("/v1/embed", {"texts": [float("nan")]}, 422, "texts.0"),
    # The OpenAI-compatible route: /v1/embed's limits, its own field names.
    ("/v1/embeddings", {"input": [], "model": "m"}, 422, "input"),
    ("/v1/embeddings", {"input": ["a", "b", "c", "d", "e"], "model": "m"}, 413, "input"),
    ("/v1/embeddings", {"input": "y" * 301, "model": "m"}, 413, "input[0]"),
    ("/v1/embeddings", {"input": ["fine", " "], "model": "m"}, 422, "input[1]"),
    ("/v1/embeddings", {"input": [101, 2023], "model": "m"}, 422, "input.0"),
    ("/v1/embeddings", {"input": "vpn"}, 422, "model"),
    ("/v1/embeddings", {"input": "vpn", "model": "m", "encoding_format": "int8"}, 422, "encoding_format"),
    ("/v1/embeddings", {"input": "vpn", "model": "m", "dimensions": 16}, 422, "dimensions"),
    ("/v1/embeddings", {"input": "vpn", "model": "m", "dimensions": 0}, 422, "dimensions"),
    ("/v1/embeddings", {"input": ["ok", "\udfff"], "model": "m"}, 422, "input.1"),
    ("/v1/embeddings", {"input": "ok", "model": "\ud800"}, 422, "model"),
]


def test_bad_input_gets_4xx_naming_the_field_and_the_service_survives(service: Service) -> None:
    client = service.client
    for path, body, status, field in BAD_REQUESTS:
        _error(_post(client, path, body), status, field)
    unicode_error = _error(_post(client, "/v1/search", {"query": "vpn \ud800 down"}), 422, "query")
    assert "lone surrogate U+D800" in unicode_error["error"], unicode_error
    deep = b'{"query": "vpn", "k": ' + b"[" * 5000 + b"]" * 5000 + b"}"  # past the parser's recursion limit
    huge = b'{"query": "vpn", "k": 1' + b"0" * 5000 + b"}"  # past Python's 4300-digit int parsing limit
    for raw in (b"{not json", b"", b'{"query": "vpn", "k": 3', "ü".encode("latin-1"), deep, huge, b"\xff\xfe\x00"):
        response = client.post("/v1/search", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code in (400, 422) and response.json().get("field") == "body", (raw[:40], response.text)
    text_body = client.post("/v1/search", content=b"query=vpn", headers={"Content-Type": "text/plain"})
    assert 400 <= text_body.status_code < 500 and text_body.json()["error"], text_body.text
    _error(client.post("/v1/nowhere", json={}), 404, None)
    for read_only in (client.post("/v1/documents", json={"documents": [{"id": "x", "text": "vpn"}]}),
                      client.get("/v1/documents/doc-1"), client.delete("/v1/documents/doc-1")):
        assert "live updates are off" in _error(read_only, 404, None)["error"]  # this service's index is read-only
    big = client.post("/v1/embed", content=b'{"texts": ["' + b"a" * (MAX_BODY_BYTES + 1) + b'"]}',
                      headers={"Content-Type": "application/json"})
    _error(big, 413, "body")

    anonymous = httpx.post(f"{service.url}/v1/search", json={"query": "vpn"})
    _error(anonymous, 401, "authorization")
    wrong = httpx.post(f"{service.url}/v1/embed", json={"texts": ["vpn"]}, headers={"Authorization": "Bearer nope"})
    _error(wrong, 401, "authorization")
    assert httpx.get(f"{service.url}/healthz").status_code == 200  # health checks need no token
    _healthy(service)


def test_hostile_but_valid_requests_are_answered(service: Service) -> None:
    client, docs = service.client, service.documents
    # A re-rank deeper than the re-ranker's batch (k=20 > 8 pairs), which Serve's batching would refuse (a 500).
    deep = _ok(_post(client, "/v1/search", {"query": docs[0]["text"], "k": 20, "rerank": True}))
    assert len(deep["hits"]) == 20 and deep["reranked"]
    # Escaped as a surrogate pair (json.dumps writes the two halves), one valid character; control,
    # zero-width and private-use characters are text that the tokenizer drops or reads as unknown.
    for text in ("vpn \ud83d\ude00 down", "\x00\x1b\u200b", "\u2028\ufeff", "\ue000\ufffe\U0010ffff"):
        assert len(_ok(_post(client, "/v1/embed", {"texts": [text]}))["vectors"]) == 1, repr(text)
    _ok(_post(client, "/v1/similarity", {"a": "\x7f\x01", "b": "x" * 300}))
    _ok(_post(client, "/v1/classify", {"texts": ["a", "b", "c", "vpn\u0085\u00adtunnel"]}))


def test_a_json_body_is_read_whatever_its_content_type(service: Service) -> None:
    from lmplatform.serving.demo import curl_command

    doc = service.documents[3]
    body = {"query": doc["text"], "k": 2}
    # curl -d sends application/x-www-form-urlencoded; other clients send text/plain or nothing.
    for content_type in ("application/x-www-form-urlencoded", "text/plain", None, "application/octet-stream"):
        assert _ok(_post(service.client, "/v1/search", body, content_type))["hits"][0]["id"] == doc["id"], content_type
    not_json = service.client.post("/v1/search", content=b"query=vpn",
                                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert "not valid JSON" in _error(not_json, 400, "body")["error"]

    # The command the demo prints, pasted as is (this service also wants its token).
    command = curl_command(service.url.removeprefix("http://"), "/v1/search", body)
    assert "Content-Type" not in command and command.startswith("curl -s 127.0.0.1:")
    assert json.loads(shlex.split(curl_command("h", "/p", {"query": "it's \"down\""}))[-1]) == {"query": "it's \"down\""}
    if shutil.which("curl"):
        pasted = subprocess.run(shlex.split(command) + ["-H", f"Authorization: Bearer {TOKEN}"],
                                capture_output=True, text=True, check=True)
        assert json.loads(pasted.stdout)["hits"][0]["id"] == doc["id"], pasted.stdout


def test_the_body_limit_holds_for_a_chunked_body(service: Service) -> None:
    def chunks(total: int) -> Iterator[bytes]:
        """A JSON body of exactly `total` bytes, sent in 4 kB chunks (httpx then sends no Content-Length)."""
        head, tail = b'{"texts": ["', b'"]}'
        filler = total - len(head) - len(tail)
        yield head
        for start in range(0, filler, 4096):
            yield b"a" * min(4096, filler - start)
        yield tail

    def post(total: int) -> httpx.Response:
        response = service.client.post("/v1/embed", content=chunks(total), headers={"Content-Type": "application/json"})
        assert response.request.headers.get("transfer-encoding") == "chunked", response.request.headers
        assert "content-length" not in response.request.headers
        return response

    for total in (10 * MAX_BODY_BYTES, MAX_BODY_BYTES + 1):
        refused = _error(post(total), 413, "body")
        assert f"limits.max_body_bytes ({MAX_BODY_BYTES} bytes)" in refused["error"], refused
    # At the limit the guard lets the body through, and the text's own limit speaks.
    _error(post(MAX_BODY_BYTES), 413, "texts[0]")
    small = service.client.post("/v1/embed", content=iter([b'{"texts": ["vpn tu', b'nnel down"]}']))
    assert small.request.headers.get("transfer-encoding") == "chunked"
    assert len(_ok(small)["vectors"]) == 1
    _healthy(service)


def _batches_split() -> Counter:
    """Batches split by a failure, summed over every replica of the batching deployments (each asked by id)."""
    from lmplatform.serving import control
    from lmplatform.serving.replicas import ask_each

    app = control.details()["applications"][APP]
    total: Counter = Counter()
    for deployment in ("RetrieverDeployment", "RerankerDeployment"):
        for answer in ask_each(app, deployment):
            assert answer.error is None, answer
            total.update(answer.status["batches_split"])
    return total


def test_a_poisoned_request_fails_alone_in_its_batch(service: Service) -> None:
    """Requests that bypass the ingress's checks (handle calls) with a text the tokenizer refuses, among good ones."""
    from ray import serve

    release = _ok(service.client.get("/v1/model"))["release_id"]
    retriever = serve.get_deployment_handle("RetrieverDeployment", app_name=APP)
    reranker = serve.get_deployment_handle("RerankerDeployment", app_name=APP)
    docs, poison = service.documents, "vpn \ud800 down"
    send = {
        "embed": lambda text: retriever.embed.remote(release, [text]),
        "search": lambda text: retriever.search.remote(release, [text], 1, 0),
        "score": lambda text: reranker.score.remote(text, [docs[0]["text"]]),
    }
    before, good, bad, split = _batches_split(), 0, 0, Counter()
    for _ in range(5):  # rounds until every method has had a batch mixing both (almost always the first)
        sent = [(kind, n, send[kind](poison if n % 2 else docs[n % len(docs)]["text"])) for n in range(24) for kind in send]
        for kind, n, response in sent:
            if n % 2:
                with pytest.raises(Exception, match="TypeError: Text"):  # the fast tokenizer refusing the text
                    response.result()
                bad += 1
                continue
            result = response.result()
            if kind == "embed":
                assert result.shape[0] == 1 and abs(float((result[0] ** 2).sum()) - 1.0) < 1e-4
            elif kind == "search":
                assert result.hits[0][0]["id"] == docs[n % len(docs)]["id"], (n, result)
            else:
                assert len(result) == 1 and 0.0 <= result[0] <= 1.0
            good += 1
        split = _batches_split() - before
        if all(split[kind] > 0 for kind in send):
            break
    assert all(split[kind] > 0 for kind in send), f"no batch mixed good and poisoned requests: {split}"
    print(f"\nisolation: {good} good requests answered, {bad} poisoned refused alone; batches split {dict(split)}")
    _healthy(service)


FUZZ_EXAMPLES = 120  # per route: 600 requests over the five routes, about 25 s on an AVX2 host


@pytest.mark.parametrize("route", hostile.fuzzed(live=False), ids=lambda route: route.path)
def test_hostile_bodies_never_get_a_5xx(service: Service, route: Route) -> None:
    tally: Counter = Counter()
    answered_by = "model_version" if "model_version" in route.response.model_fields else "model"  # OpenAI's: model

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=hostile.bodies(route), content_type=hostile.content_type)
    def check(body: bytes, content_type: Optional[str]) -> None:
        response = service.client.request(route.method, route.path, content=body,
                                          headers={"Content-Type": content_type} if content_type else {})
        status = response.status_code
        tally["cases"] += 1
        tally[f"{status // 100}xx"] += 1
        assert status < 500, (route, body[:300], response.text)
        payload = response.json()
        if status >= 400:
            assert payload["error"] and payload["field"], (body[:300], payload)
            tally["refused as not Unicode"] += "lone surrogate" in payload["error"]
        else:
            assert "error" not in payload and payload[answered_by], payload
        if hostile.has_lone_surrogate(body):
            tally["with a lone surrogate"] += 1
            assert status in (400, 413, 422), (body[:300], response.text)

    check()
    print(f"\nfuzz {route.path}: {dict(tally)}")
    # The strategies reached the models and the new check, or this test proves little.
    assert tally["2xx"] > 0 and tally["refused as not Unicode"] > 0, tally
    _healthy(service)


CLIENTS = 4


def test_hot_reload_moves_to_the_new_champion_without_a_failed_request(service: Service) -> None:
    """4 clients send requests while 2 replicas of each model deployment move to version 2."""
    from mlflow.tracking import MlflowClient

    from lmplatform.serving import control
    from lmplatform.serving.replicas import ask_each, lacking, running_replicas

    docs = service.documents
    per_client: list[list[tuple[int, str, str]]] = [[] for _ in range(CLIENTS)]
    stop = threading.Event()

    def client_loop(outcomes: list[tuple[int, str, str]], first: int) -> None:
        with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
            n = first
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

    def seen(version: str) -> bool:  # every client has had an answer from `version`
        return all(any(v == version for _, _, v in outcomes) for outcomes in per_client)

    MlflowClient(service.tracking_uri).set_registered_model_alias(MODEL_NAME, "champion", "2")
    threads = [threading.Thread(target=client_loop, args=(outcomes, 5 * i), daemon=True)
               for i, outcomes in enumerate(per_client)]
    for thread in threads:
        thread.start()
    try:
        while not seen(f"{MODEL_NAME}/1") and all(t.is_alive() for t in threads):
            time.sleep(0.05)  # every client is under way before the reload starts
        result = control.reload(APP, timeout_s=180)
        while not seen(f"{MODEL_NAME}/2") and all(t.is_alive() for t in threads):
            time.sleep(0.05)  # and each has been answered by the new model
    finally:
        stop.set()
        for thread in threads:
            thread.join()

    assert result.changed and result.previous == f"{MODEL_NAME}/1" and result.current == f"{MODEL_NAME}/2"
    total = sum(len(outcomes) for outcomes in per_client)
    for outcomes in per_client:
        failed = [o for o in outcomes if o[0] != 200]
        assert len(outcomes) > 3, outcomes  # each loop really ran across the reload
        assert not failed, f"{len(failed)} of {len(outcomes)} requests failed during the reload: {failed[:5]}"
        versions = [v for _, _, v in outcomes]
        assert versions[0] == f"{MODEL_NAME}/1" and versions[-1] == f"{MODEL_NAME}/2"
        first_new = versions.index(f"{MODEL_NAME}/2")
        assert all(v == f"{MODEL_NAME}/2" for v in versions[first_new:])  # no request went back to the old model
    print(f"\nreload with {CLIENTS} clients: {total} requests, 0 failed, in {result.seconds:.1f}s")

    # Each replica, asked by its id, holds the new release; and one that lacks a release is named.
    app = control.details()["applications"][APP]
    for deployment in MODEL_DEPLOYMENTS:
        listed = {r["replica_id"] for r in running_replicas(app, deployment)}
        answers = ask_each(app, deployment)
        assert len(listed) == 2 and {a.replica_id for a in answers} == listed, (listed, answers)
        assert all(a.error is None and f"{MODEL_NAME}/2" in a.status["releases"] for a in answers), answers
        problems = lacking(app, deployment, f"{MODEL_NAME}/99")
        assert len(problems) == 2 and all(any(rid in p for p in problems) for rid in listed), problems

    # The served version is in the metrics. (Version 1's series ends later, once Ray has not been sent it for two
    # export intervals: not waited for here.)
    metric_reaches("lmp_model_info", 1, model_version="2", release=f"{MODEL_NAME}/2")

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
    assert status["deployments"]["RetrieverDeployment"]["replicas"] == 2
    assert status["ingress"] == "proxy" and status["direct_ingress"] == []  # the test Ray runs Serve behind its proxy
    bad = runner.invoke(lmp, ["serve", "run", "--ingress", "nginx"])
    assert bad.exit_code == 2 and "--ingress 'nginx': choose one of proxy, direct, haproxy" in bad.output, bad.output
    missing = runner.invoke(lmp, ["serve", "status", "--name", "no-such-app"])
    assert missing.exit_code == 2 and "no Serve application named 'no-such-app'" in missing.output


def test_a_second_tracker_is_refused_the_route_prefix_another_app_serves(service: Service) -> None:
    """`lmp pipeline tracker` names its app after the tracker; on a cluster already serving another app under a
    prefix, a tracker asking for the same prefix fails before it trains, naming the app and the flag."""
    from lmplatform.config.loader import ConfigError
    from lmplatform.pipeline.tracker_system import check_route_free
    from lmplatform.serving import control

    assert control.route_owners() == {APP: "/"}
    with pytest.raises(ConfigError, match=rf"route_prefix: / is served by application '{APP}' on this cluster; give "
                                          r"tracker 'writer' its own \(--serve-route-prefix /writer\)"):
        check_route_free("writer", "/")
    check_route_free(APP, "/")  # the same tracker served again replaces itself
    check_route_free("writer", "/writer")


def test_a_model_without_head_labels_or_bm25_refuses_classification_and_hybrid_but_still_searches(service: Service) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.serving import control

    MlflowClient(service.tracking_uri).set_registered_model_alias(MODEL_NAME, "champion", "3")
    assert control.reload(APP, timeout_s=180).current == f"{MODEL_NAME}/3"
    info = _ok(service.client.get("/v1/model"))
    assert (info["version"], info["dim"], info["classifier"], info["hybrid"]) == ("3", 32, "unavailable", False)
    refused = service.client.post("/v1/classify", json={"texts": ["vpn tunnel down"]})
    assert refused.status_code == 404 and "no labels" in refused.json()["error"], refused.text
    no_bm25 = _error(service.client.post("/v1/search", json={"query": "vpn tunnel down", "mode": "hybrid"}), 422, "mode")
    assert "needs a BM25 index" in no_bm25["error"], no_bm25
    _healthy(service)
