"""A live index served for real: documents added and removed over HTTP while 2 retriever replicas serve, the change
log replayed by restarted replicas, and the index following the champion (started once for the module).

Its own application, beside test_service.py's read-only one: live updates need a writable change-log folder, and
these tests kill replicas, which the shared service's exact counts must not see. Version 1 (width 32, the
champion) is served with an index of title and text; version 2 (width 48) is registered without any index, so
that moving the alias to it only works if the service rebuilds one (Ray Data) from the documents served.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from lmplatform.testing.local_cluster import free_port
from lmplatform.testing.registered import register_with_index
from tests.conftest import new_mlflow_store, write_tiny_bert
from tests.serving import hostile
from tests.serving.scrape import metric_reaches, samples
from tests.serving.servable import QUICK_STOP, make_documents, write_index

APP = "lmp-live-test"
MODEL_NAME = "live-test-encoder"
FIELDS = ["title", "text"]
RETRIEVER, WRITER = "RetrieverDeployment", "ChangeLogWriter"
MAX_ID_CHARS = 40
MAX_DOCUMENT_CHARS = 120_000  # beyond a real report's 100,000 characters, cheap to send past


@dataclass
class LiveService:
    url: str
    client: httpx.Client
    tracking_uri: str
    documents: list[dict[str, str]]
    tmp: Path

    def release(self) -> str:
        return _ok(self.client.get("/v1/model"))["release_id"]
# Short bounds, so that a writer restart outlasts them: reads answer without it, writes get 503.
READ_WAIT_S, WRITE_WAIT_S = 1.0, 2.0


@pytest.fixture(scope="module")
def live(ray_session, tiny_bert: Path, mlflow_template: Path, tmp_path_factory: pytest.TempPathFactory):
    from ray import serve

    from lmplatform.serving import control
    from lmplatform.serving.settings import ServeSettings

    tmp = tmp_path_factory.mktemp("live")
    tracking_uri = new_mlflow_store(mlflow_template, tmp / "mlruns")
    documents = make_documents(24)
    register_with_index(tracking_uri, MODEL_NAME, tiny_bert, write_index(tiny_bert, documents, tmp / "index-v1",
                                                                        fields=FIELDS), alias="champion")
    register_with_index(tracking_uri, MODEL_NAME, write_tiny_bert(tmp / "model-v2", hidden=48), None)
    settings = ServeSettings(
        model=f"models:/{MODEL_NAME}@champion", tracking_uri=tracking_uri, cache_dir=str(tmp / "cache"), num_threads=1,
        live={"dir": str(tmp / "changes"), "fields": FIELDS, "snapshot_every": 16, "rebuild_cpus": 0.5,
              "read_wait_s": READ_WAIT_S, "write_wait_s": WRITE_WAIT_S},
        limits={"max_texts": 4, "max_documents": 4, "max_id_chars": MAX_ID_CHARS, "max_text_chars": 300,
                "max_document_chars": MAX_DOCUMENT_CHARS, "max_body_bytes": 400_000},
        batching={"max_batch_size": 8, "batch_wait_timeout_s": 0.002},
    )
    small = {"num_cpus": 0.1}
    deployments = [{"name": d, "ray_actor_options": small, "num_replicas": 2 if d == RETRIEVER else 1, **QUICK_STOP}
                   for d in (RETRIEVER, "ClassifierDeployment", "ServeIngress", WRITER)]
    port = free_port()
    control.start("127.0.0.1", port)
    control.deploy(control.application_config(settings, name=APP, deployments=deployments), timeout_s=240)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    yield LiveService(f"http://127.0.0.1:{port}", client, tracking_uri, documents, tmp)
    client.close()
    serve.shutdown()


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _error(response: httpx.Response, status: int, field: Optional[str]) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["field"] == field and body["error"], body
    return body


def _doc(doc_id: str, words: str, label: str = "network") -> dict[str, str]:
    return {"id": doc_id, "title": f"new {doc_id}", "text": f"{words} {doc_id}", "label": label}


def _query(doc: dict[str, str]) -> str:
    return f"{doc['title']}. {doc['text']}"  # what was encoded: title and text, as live.fields says


def _top(client: httpx.Client, doc: dict[str, str], k: int = 3) -> list[dict[str, Any]]:
    return _ok(client.post("/v1/search", json={"query": _query(doc), "k": k}))["hits"]


def _replicas() -> dict[str, dict[str, Any]]:
    """Every retriever replica, asked by its id, after catching up with the log: its index of the newest release."""
    from lmplatform.serving import control
    from lmplatform.serving.replicas import ask_each

    answers = ask_each(control.details()["applications"][APP], RETRIEVER)
    assert answers and all(a.error is None for a in answers), answers
    return {a.replica_id: a.status["live"][a.status["newest"]] for a in answers}


def _committed() -> int:
    from ray import serve

    return serve.get_deployment_handle(WRITER, app_name=APP).describe.remote().result()["committed"]


def test_an_upsert_is_found_by_the_next_search_on_every_replica(live: LiveService) -> None:
    client = live.client
    filed = {"product": "ledger", "created": "2026-11-27T10:00:00Z"}  # kept for a metadata fusion, through the log
    new = [_doc("new-a", "refund card invoice", "billing") | {"metadata": filed}, _doc("new-b", "vpn tunnel latency")]
    replaced = {**live.documents[0], "title": "replaced", "text": "disk quota snapshot volume replaced"}
    answer = _ok(client.post("/v1/documents", json={"documents": [*new, replaced]}))
    assert answer["upserted"] == 3 and answer["seq"] == 3 and answer["model_version"] == f"{MODEL_NAME}/1"
    for doc in (*new, replaced):  # the next search finds each, with its own vector
        top = _top(client, doc)[0]
        assert top["id"] == doc["id"] and top["score"] == pytest.approx(1.0, abs=1e-4) and top["title"] == doc["title"]
    got = _ok(client.get("/v1/documents/new-a"))
    assert (got["text"], got["label"], got["model_version"]) == (new[0]["text"], "billing", f"{MODEL_NAME}/1")
    assert got["metadata"] == filed and _ok(client.get(f"/v1/documents/{replaced['id']}"))["metadata"] == replaced["metadata"]
    assert _ok(client.get("/v1/model"))["index_size"] == 26

    # Read-your-writes whichever replica answers: each search starts right after its upsert's 200.
    for n in range(12):
        doc = _doc(f"ryw-{n}", "payment gateway certificate")
        seq = _ok(client.post("/v1/documents", json={"documents": [doc]}))["seq"]
        assert _top(client, doc)[0]["id"] == doc["id"], (n, seq)
        mode = "hybrid" if n % 2 else "dense"  # BM25 follows the upserts too
        hybrid = _ok(client.post("/v1/search", json={"query": _query(doc), "k": 3, "mode": mode}))
        assert hybrid["hits"][0]["id"] == doc["id"] and hybrid["mode"] == mode

    # Both replicas, each asked by its id, hold the same documents with the same vectors, and find the upserts.
    replicas = _replicas()
    assert len(replicas) == 2, replicas
    assert {r["seq"] for r in replicas.values()} == {_committed()} == {15}
    assert len({(r["fingerprint"], r["documents"]) for r in replicas.values()}) == 1, replicas
    for state in replicas.values():
        assert state["documents"] == 24 + 2 + 12 and state["recent_found"] and all(state["recent_found"].values())
    page = metric_reaches("lmp_documents_total", 15, op="upsert")
    assert sum(samples(page, "lmp_documents_total", op="upsert")) == 15
    # each counter is exported on its own interval: wait for this one too rather than read it off the same page
    metric_reaches("lmp_requests_total", 1, route="/v1/documents/{doc_id}", method="GET", status="200")


def _restart_one_of_each(*deployments: str) -> list[str]:
    """Kill one replica of each deployment (as a crash would) and wait until Serve runs a new one of each; their ids."""
    import ray

    from lmplatform.serving import control
    from lmplatform.serving.replicas import SERVE_NAMESPACE, running_replicas

    def running(deployment: str) -> set[str]:
        return {r["replica_id"] for r in running_replicas(control.details()["applications"][APP], deployment)}

    before = {d: running_replicas(control.details()["applications"][APP], d) for d in deployments}
    for replicas in before.values():
        ray.kill(ray.get_actor(replicas[0]["actor_name"], namespace=SERVE_NAMESPACE), no_restart=True)
    fresh: list[str] = []
    for deployment, replicas in before.items():
        old = {r["replica_id"] for r in replicas}
        while len(now := running(deployment)) != len(old) or replicas[0]["replica_id"] in now:
            time.sleep(0.5)
        fresh.append(next(iter(now - old)))
    return fresh


def test_a_restarted_replica_replays_the_log_and_a_deleted_document_stays_deleted(live: LiveService) -> None:
    client = live.client
    base, upserted = live.documents[5], _doc("new-b", "vpn tunnel latency")
    for doc_id in (base["id"], "new-b"):
        deleted = _ok(client.delete(f"/v1/documents/{doc_id}"))
        assert deleted["id"] == doc_id and deleted["seq"] > 0
        _error(client.get(f"/v1/documents/{doc_id}"), 404, "id")
    _error(client.delete("/v1/documents/new-b"), 404, "id")  # nothing left to delete
    for doc in (base, upserted):
        assert doc["id"] not in {h["id"] for h in _top(client, doc, k=20)}
    before = _replicas()
    assert len({r["fingerprint"] for r in before.values()}) == 1

    # Serve replaces a killed replica; requests meanwhile are answered (a call whose replica died is sent again):
    # reads never wait on the writer beyond live.read_wait_s, and writes get 200 or a 503 with Retry-After.
    answered, written, retry_after = Counter(), Counter(), set()
    stop = threading.Event()

    def searching() -> None:
        with httpx.Client(base_url=live.url, timeout=60) as other:
            while not stop.is_set():
                response = other.post("/v1/search", json={"query": _query(live.documents[3]), "k": 2})
                answered[response.status_code] += 1

    def writing() -> None:
        with httpx.Client(base_url=live.url, timeout=60) as other:
            while not stop.is_set():
                response = other.post("/v1/documents", json={"documents": [_doc("during-restart", "vpn tunnel")]})
                written[response.status_code] += 1
                retry_after.add(response.headers.get("retry-after") if response.status_code == 503 else "-")

    threads = [threading.Thread(target=searching, daemon=True), threading.Thread(target=writing, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        # The writer too: it opens the log again and goes on from its last change.
        fresh, writer = _restart_one_of_each(RETRIEVER, WRITER)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert answered[200] > 0 and set(answered) == {200}, answered
    assert written[200] > 0 and set(written) <= {200, 503} and None not in retry_after, (written, retry_after)
    # A write answered 503 may still be applied after its answer: once no more land, take the document back out
    # (the fingerprint below compares the documents held).
    settled = _committed()
    while time.sleep(1.0) or _committed() != settled:
        settled = _committed()
    _ok(client.delete("/v1/documents/during-restart"))
    after = _replicas()
    assert fresh in after and writer
    # the restarted replica holds what the other one holds (same ids, vectors; the writes made during the restart
    # and the deletion of their document included)
    assert len({r["fingerprint"] for r in after.values()}) == 1 and len(after) == len(before)
    # its replay applied the last change of each document (test_changelog.py); the writes that landed after it
    # started count one each
    assert after[fresh]["seq"] == _committed() and after[fresh]["applied"] >= after[fresh]["touched"]
    for doc in (base, upserted):
        assert doc["id"] not in {h["id"] for h in _top(client, doc, k=20)}
        _error(client.get(f"/v1/documents/{doc['id']}"), 404, "id")
    seq = _ok(client.post("/v1/documents", json={"documents": [_doc("after-restart", "disk backup queue")]}))["seq"]
    assert seq == max(r["seq"] for r in after.values()) + 1  # the restarted writer numbers on, no gap
    assert _top(client, _doc("after-restart", "disk backup queue"))[0]["id"] == "after-restart"


BAD_DOCUMENTS = [
    ({"documents": []}, 422, "documents"),
    ({"documents": [_doc(f"d{i}", "vpn") for i in range(5)]}, 413, "documents"),
    ({"documents": [{"id": "a", "text": ""}]}, 422, "documents[0].text"),
    ({"documents": [{"id": "a", "text": "  \n"}]}, 422, "documents[0].text"),
    ({"documents": [{"id": "a", "text": "x" * (MAX_DOCUMENT_CHARS + 1)}]}, 413, "documents[0].text"),
    ({"documents": [{"id": "a", "text": "vpn", "title": "t" * (MAX_DOCUMENT_CHARS + 1)}]}, 413, "documents[0].title"),
    ({"documents": [{"id": "i" * (MAX_ID_CHARS + 1), "text": "vpn"}]}, 413, "documents[0].id"),
    ({"documents": [{"id": " ", "text": "vpn"}]}, 422, "documents[0].id"),
    ({"documents": [{"id": "x\ny", "text": "vpn"}]}, 422, "documents[0].id"),  # no path could address it
    ({"documents": [{"id": "x", "text": "vpn", "label": "a\x00"}]}, 422, "documents[0].label"),
    ({"documents": [{"id": "a", "text": "vpn"}, {"id": "a", "text": "disk"}]}, 422, "documents[1].id"),
    ({"documents": [{"id": "a", "text": "vpn", "label": ""}]}, 422, "documents[0].label"),
    ({"documents": [{"id": "a", "text": "vpn \ud800 down"}]}, 422, "documents.0.text"),
    ({"documents": [{"id": "\udfff", "text": "vpn"}]}, 422, "documents.0.id"),
    ({"documents": [{"id": 7, "text": "vpn"}]}, 422, "documents.0.id"),
    ({"documents": [{"text": "vpn"}]}, 422, "documents.0.id"),
    ({"documents": [{"id": "a", "text": "vpn", "colour": "red"}]}, 422, "documents.0.colour"),
    ({"documents": {"id": "a", "text": "vpn"}}, 422, "documents"),
    ({"document": [{"id": "a", "text": "vpn"}]}, 422, "documents"),
]


def test_a_client_reads_its_own_writes_by_min_seq_and_every_answer_says_its_seq(live: LiveService) -> None:
    client = live.client
    seq = _ok(client.post("/v1/documents", json={"documents": [_doc("own-write", "printer toner smudge")]}))["seq"]
    for _ in range(4):  # whichever replica answers
        found = _ok(client.post("/v1/search", json={"query": "printer toner smudge", "k": 1, "min_seq": seq}))
        assert found["hits"][0]["id"] == "own-write" and found["as_of_seq"] >= seq and found["caught_up"] is True
    report = {"report": {"text": "printer toner smudge"}, "k": 1, "min_seq": seq}
    assert _ok(client.post("/v1/duplicates", json=report))["as_of_seq"] >= seq
    # a seq no write returned: the writer answered, and has no such change
    _error(client.post("/v1/search", json={"query": "vpn", "min_seq": seq + 10_000}), 422, "min_seq")
    _error(client.post("/v1/search", json={"query": "vpn", "min_seq": -1}), 422, "min_seq")
    _ok(client.delete("/v1/documents/own-write"))


def test_bad_document_requests_are_refused_naming_the_field(live: LiveService) -> None:
    client = live.client
    committed = _committed()
    for body, status, field in BAD_DOCUMENTS:
        response = client.post("/v1/documents", content=json.dumps(body).encode("ascii"),
                               headers={"Content-Type": "application/json"})
        _error(response, status, field)
    _error(client.get(f"/v1/documents/{'i' * (MAX_ID_CHARS + 1)}"), 413, "id")
    _error(client.delete(f"/v1/documents/{quote(' ')}"), 422, "id")
    _error(client.get("/v1/documents/no-such-doc"), 404, "id")
    _error(client.post("/v1/documents", content=b'{"documents": [', headers={"Content-Type": "application/json"}),
           400, "body")
    assert _committed() == committed  # nothing refused reached the log
    slashed = _doc("a/b c", "vpn tunnel")  # any id a path can carry
    _ok(client.post("/v1/documents", json={"documents": [slashed]}))
    assert _ok(client.get(f"/v1/documents/{quote('a/b c', safe='')}"))["id"] == "a/b c"
    for control in ("\n", "\r", "\x00", "\x7f"):  # never read as the id before it (a route's $ before a newline)
        _error(client.delete(f"/v1/documents/{quote('a/b c' + control, safe='')}"), 422, "id")
        _error(client.get(f"/v1/documents/{quote('a/b c' + control, safe='')}"), 422, "id")
    assert _ok(client.delete("/v1/documents/a/b c"))["id"] == "a/b c"


def test_the_index_follows_a_promotion_during_upserts_and_loses_no_change(live: LiveService) -> None:
    """Upserts and deletes keep coming while the alias moves to version 2, which has no index: the watcher (as
    `lmp serve run --watch-interval` runs it) rebuilds one with Ray Data from the documents served and reloads."""
    from typer.testing import CliRunner

    from lmplatform.cli import app as lmp
    from lmplatform.serving import control

    acked: dict[str, int] = {}
    deleted: set[str] = set()
    failures: list[str] = []
    versions: list[str] = []
    stop, reloaded = threading.Event(), threading.Event()

    def changing() -> None:
        with httpx.Client(base_url=live.url, timeout=120) as other:
            n = 0
            while not stop.is_set() or (reloaded.is_set() and len(set(versions)) < 2):
                doc = _doc(f"during-{n}", "invoice refund gateway")
                response = other.post("/v1/documents", json={"documents": [doc]})
                if response.status_code != 200:
                    failures.append(f"upsert {n}: {response.status_code} {response.text}")
                    return
                acked[doc["id"]] = response.json()["seq"]
                versions.append(response.json()["model_version"])
                if n % 4 == 3:  # delete one of the earlier ones
                    gone = f"during-{n - 2}"
                    response = other.delete(f"/v1/documents/{gone}")
                    if response.status_code != 200:
                        failures.append(f"delete {gone}: {response.status_code} {response.text}")
                        return
                    deleted.add(gone)
                n += 1

    watching = threading.Event()
    lines: list[str] = []
    watcher = threading.Thread(target=control.watch, args=(APP, 1.0, watching.is_set, lines.append), daemon=True)
    changer = threading.Thread(target=changing, daemon=True)
    watcher.start()
    changer.start()
    try:
        while len(acked) < 5 and changer.is_alive():
            time.sleep(0.1)
        before_promotion = max(acked.values())
        promoted = CliRunner().invoke(lmp, ["models", "promote", MODEL_NAME, "2", "--tracking-uri", live.tracking_uri])
        assert promoted.exit_code == 0 and "to version 2" in promoted.output, promoted.output
        while not any("reloaded" in line or "failed" in line for line in lines) and watcher.is_alive():
            time.sleep(0.2)
        if any("reloaded" in line for line in lines):
            reloaded.set()
    finally:
        stop.set()
        changer.join()
        watching.set()
        watcher.join()
    assert not failures, failures
    assert any(line.startswith("rebuild: ") for line in lines) and any("reloaded" in line for line in lines), lines
    assert versions[0] == f"{MODEL_NAME}/1" and versions[-1].startswith(f"{MODEL_NAME}/2+live"), versions[-3:]

    info = _ok(live.client.get("/v1/model"))
    assert (info["version"], info["dim"]) == ("2", 48) and info["live_seq"] == _committed()
    for doc_id, seq in acked.items():  # every acknowledged change is in the new index, with the new model's vectors
        if doc_id in deleted:
            _error(live.client.get(f"/v1/documents/{doc_id}"), 404, "id")
            continue
        doc = _doc(doc_id, "invoice refund gateway")
        top = _top(live.client, doc)[0]
        assert top["id"] == doc_id and top["score"] == pytest.approx(1.0, abs=1e-4), (doc_id, seq, top)
    for doc in live.documents[1:5]:  # and so is the base corpus
        assert _top(live.client, doc)[0]["id"] == doc["id"]

    replicas = _replicas()  # the spy: each replica's index of version 2 went from the rebuild's seq to the last change
    assert len({(r["fingerprint"], r["documents"], r["seq"]) for r in replicas.values()}) == 1, replicas
    state = next(iter(replicas.values()))
    _, after_rebuild = _changes_since(state["base_seq"])
    assert state["seq"] == _committed() and before_promotion <= state["base_seq"] < state["seq"], (state, before_promotion)
    assert after_rebuild and state["touched"] == len(after_rebuild)  # the changes made during the rebuild, each applied
    assert state["documents"] == len(_all_held(live))
    print(f"\npromotion during changes: {len(acked)} upserts and {len(deleted)} deletes acknowledged, 0 failed; "
          f"rebuilt as of change {state['base_seq']}, {len(after_rebuild)} documents changed after it applied "
          f"({state['encoded']} encoded again by version 2)")


def _changes_since(seq: int) -> tuple[int, list[Any]]:
    from ray import serve

    return serve.get_deployment_handle(WRITER, app_name=APP).changes_since.remote(seq).result()


def _all_held(live: LiveService) -> set[str]:
    """Every id the index should hold: the base corpus and the upserts, less the deletions (the log's last word)."""
    _, changes = _changes_since(0)
    base = {d["id"] for d in live.documents}
    return (base | {c.id for c in changes if c.op == "upsert"}) - {c.id for c in changes if c.op == "delete"}


FUZZ_EXAMPLES = 150


def test_hostile_document_bodies_and_ids_never_get_a_5xx(live: LiveService) -> None:
    tally: Counter = Counter()
    (documents,) = hostile.fuzzed(live=True)  # POST /v1/documents: a second live route with a body gets its own test

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=hostile.bodies(documents), content_type=hostile.content_type)
    def post(body: bytes, content_type: Optional[str]) -> None:
        response = live.client.request(documents.method, documents.path, content=body,
                                       headers={"Content-Type": content_type} if content_type else {})
        tally[f"post {response.status_code // 100}xx"] += 1
        assert response.status_code < 500, (body[:300], response.text)
        payload = response.json()
        assert payload["field"] if response.status_code >= 400 else payload["upserted"] > 0, payload
        if hostile.has_lone_surrogate(body):
            assert response.status_code in (400, 413, 422), (body[:300], response.text)

    @settings(max_examples=FUZZ_EXAMPLES // 3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(doc_id=hostile.path_id, method=hostile.st.sampled_from(["GET", "DELETE"]))
    def by_id(doc_id: str, method: str) -> None:
        response = live.client.request(method, f"/v1/documents/{quote(doc_id, safe='')}")
        tally[f"{method} {response.status_code}"] += 1
        assert response.status_code < 500, (doc_id, response.text)
        assert response.status_code == 200 or response.json()["error"], response.text

    post()
    by_id()
    print(f"\nfuzz /v1/documents: {dict(tally)}")
    assert tally["post 2xx"] > 0 and tally["post 4xx"] > 0, tally
    assert _top(live.client, live.documents[2])[0]["id"] == live.documents[2]["id"]



def _long_text(words: str, n: int = 100_000) -> str:
    """A real report's length: its words, then a stack trace that runs to `n` characters."""
    trace = "".join(f"\n  at org.openoffice.Calc.recalc(Cell.java:{line}) disk quota volume {line}" for line in range(2000))
    return (words + " " + trace)[:n]


def test_a_long_report_is_upserted_and_added_by_its_duplicates_search_after_it(live: LiveService) -> None:
    """A 100,000-character document is upserted and found by its own text; /v1/duplicates with add: true searches
    first (the report is not among its hits), then stores it: the answer's seq, and the next search finds it."""
    client = live.client
    long = {"id": "long-1", "title": "calc recalculation hangs", "text": _long_text("recalc hangs on a large sheet")}
    assert len(long["text"]) == 100_000
    assert _ok(client.post("/v1/documents", json={"documents": [long]}))["upserted"] == 1
    for mode in ("dense", "hybrid"):
        found = _ok(client.post("/v1/search", json={"query": _query(long), "k": 3, "mode": mode}))["hits"]
        assert found[0]["id"] == "long-1", (mode, found)
    assert _ok(client.get("/v1/documents/long-1"))["text"] == long["text"]

    report = {"id": "long-2", "title": "calc recalculation hangs again", "text": _long_text("recalc hangs on save"),
              "metadata": {"product": "calc", "created": "2026-11-28T10:00:00Z"}}
    before = _committed()
    answer = _ok(client.post("/v1/duplicates", json={"report": report, "k": 5, "mode": "hybrid", "add": True}))
    assert answer["seq"] == before + 1 == _committed() and answer["mode"] == "hybrid"
    assert "long-2" not in {h["id"] for h in answer["hits"]} and answer["hits"][0]["id"] == "long-1", answer["hits"]
    stored = _ok(client.get("/v1/documents/long-2"))
    assert (stored["title"], stored["text"], stored["metadata"]) == (report["title"], report["text"], report["metadata"])
    assert _top(client, report)[0]["id"] == "long-2"  # findable by the very next search
    again = _ok(client.post("/v1/duplicates", json={"report": report, "k": 5}))  # filed again: still not itself
    assert again["seq"] is None and "long-2" not in {h["id"] for h in again["hits"]}
    anonymous = {k: v for k, v in report.items() if k != "id"}
    assert _ok(client.post("/v1/duplicates", json={"report": anonymous, "k": 1}))["hits"][0]["id"] == "long-2"
    _error(client.post("/v1/duplicates", json={"report": anonymous, "add": True}), 422, "report.id")
    over = {**report, "text": "x" * (MAX_DOCUMENT_CHARS + 1)}
    _error(client.post("/v1/duplicates", json={"report": over, "add": True}), 413, "report.text")
    assert _committed() == before + 1  # nothing refused reached the log


def test_a_bulk_import_is_a_new_index_version_and_live_changes_continue_on_top(live: LiveService) -> None:
    """An export of 30 reports (one an existing document's newer copy, plus a repeated id and a broken row) is
    loaded while upserts keep coming: a Ray Data job builds the alias's version a new index as of the change log's
    seq at the cut, the app reloads onto it, and each replica applies the changes after the cut: every report, every
    acknowledged upsert and every earlier document is held once, none missing."""
    from lmplatform.serving import control
    from lmplatform.serving.rebuild import BulkImport
    from lmplatform.serving.release import ReleaseError

    client = live.client
    newer = {**live.documents[7], "text": "the export's newer copy of this report"}
    reports = [_doc(f"imported-{i}", "export spreadsheet macro") for i in range(29)] + [newer]
    export = live.tmp / "export.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in reports) + "{broken\n" + json.dumps(reports[0]) + "\n")
    held_before = next(iter(_replicas().values()))["documents"]

    acked: dict[str, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def changing() -> None:
        with httpx.Client(base_url=live.url, timeout=120) as other:
            n = 0
            while not stop.is_set():
                doc = _doc(f"during-import-{n}", "scanner driver timeout")
                response = other.post("/v1/documents", json={"documents": [doc]})
                if response.status_code != 200:
                    failures.append(f"upsert {n}: {response.status_code} {response.text}")
                    return
                acked[doc["id"]] = response.json()["seq"]
                n += 1

    lines: list[str] = []
    changer = threading.Thread(target=changing, daemon=True)
    changer.start()
    try:
        control.rebuild(APP, progress=lines.append, bulk=BulkImport(str(export)))
        time.sleep(0.5)  # some upserts after the reload too
    finally:
        stop.set()
        changer.join()
    assert not failures, failures
    assert any("import: 30 reports imported" in line and "skipped 1 repeated ids (the first kept), 1 unreadable rows"
               in line for line in lines), lines
    state = next(iter(_replicas().values()))
    _, after_cut = _changes_since(state["base_seq"])
    assert state["seq"] == _committed() and after_cut and state["touched"] == len(after_cut)  # applied on top
    assert len({r["fingerprint"] for r in _replicas().values()}) == 1
    assert state["documents"] == held_before + 29 + len(acked)  # nothing missing, nothing held twice
    assert _ok(client.get(f"/v1/documents/{newer['id']}"))["text"] == newer["text"]
    for doc in [*reports[:3], *(_doc(i, "scanner driver timeout") for i in list(acked)[-3:])]:
        assert _top(client, doc)[0]["id"] == doc["id"]
    assert _top(client, live.documents[8])[0]["id"] == live.documents[8]["id"]  # kept beside the export

    release = live.release()
    with pytest.raises(control.ServeControlError, match="--corpus: .*missing.jsonl does not exist"):
        control.rebuild(APP, bulk=BulkImport(str(live.tmp / "missing.jsonl")))
    unreadable = live.tmp / "unreadable.jsonl"
    unreadable.write_text("{broken\n" + json.dumps({"title": "no id"}) + "\n")
    with pytest.raises(ReleaseError, match=r"unreadable.jsonl: no report was read \(a row needs 'id'\)"):
        control.rebuild(APP, bulk=BulkImport(str(unreadable)))
    assert live.release() == release  # refused before anything was built or reloaded
