"""A release's live index without Ray: changes from a real change log applied to a real FAISS index, BM25 and store,
stored vectors used as they are, another model's encoded again, and two replicas that applied the same log in
different steps holding the same documents with the same vectors."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from lmplatform.models.encoder import Encoder
from lmplatform.retrieval.incremental_bm25 import IncrementalBM25
from lmplatform.retrieval.index import VectorIndex
from lmplatform.retrieval.retrievers import hybrid_search
from lmplatform.retrieval.settings import FusionSettings
from lmplatform.retrieval.store import DocumentStore, StoredDocument
from lmplatform.serving.changelog import Change, ChangeLog, vector_bytes
from lmplatform.serving.live import LiveIndex, document_text
from tests.serving.servable import make_documents

MODEL = "models:/enc/1"
FIELDS = ["title", "text"]


@pytest.fixture(scope="module")
def encoder(tiny_bert: Path) -> Encoder:
    return Encoder.from_pretrained(tiny_bert)


def _base(encoder: Encoder) -> tuple[VectorIndex, DocumentStore]:
    docs = make_documents(12)
    vectors = encoder.encode([document_text(d, FIELDS) for d in docs])
    store = DocumentStore({d["id"]: StoredDocument(d["title"], d["text"], d["label"]) for d in docs})
    return VectorIndex.build([d["id"] for d in docs], vectors), store


def _upsert(encoder: Encoder, doc_id: str, text: str, model: str = MODEL, label: str = "network") -> Change:
    vector = encoder.encode([document_text({"title": "new", "text": text}, FIELDS)])[0]
    return Change("upsert", doc_id, "new", text, label, model, vector_bytes(vector))


def test_changes_from_the_log_move_vectors_bm25_store_and_labels(encoder: Encoder, tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    index, store = _base(encoder)
    live = LiveIndex.from_base(index, store, True, 0, MODEL, FIELDS)
    other_model = _upsert(encoder, "doc-1", "vpn tunnel gateway", model="models:/enc/0",
                          label="".join(["net", "work"]))  # a new string, as a request's JSON gives it
    other_model.vector = vector_bytes(np.ones(index.dim, dtype=np.float32))  # not this model's: encoded again
    with_metadata = _upsert(encoder, "new-1", "refund card invoice", label="refunds")
    with_metadata.metadata = {"product": "Billing", "created": 979_084_800}  # through the log's lines and back
    log.append([with_metadata, other_model])
    log.append([Change("delete", "doc-2"), Change("delete", "never-held")])

    assert live.apply(*log.changes_since(live.seq), encoder.encode) == 4
    assert (live.seq, live.applied, live.encoded, len(live.index)) == (4, 4, 1, 12)
    assert live.document("doc-2") is None and live.document("new-1")["label"] == "refunds"
    assert live.store["new-1"].metadata == {"product": "Billing", "created": 979_084_800}
    assert live.document("doc-1")["metadata"] == {}
    # one copy of a label however many documents carry it
    assert live.store["doc-1"].label is live.store["doc-0"].label == "network"
    assert "refunds" in live.labels and live.document("doc-1")["text"] == "vpn tunnel gateway"
    stored = np.frombuffer(log.latest["new-1"].vector, dtype="<f4")
    assert np.array_equal(live.index.reconstruct(["new-1"])[0], stored)  # the logged vector, bit for bit
    reencoded = encoder.encode([document_text({"title": "new", "text": "vpn tunnel gateway"}, FIELDS)])[0]
    assert np.allclose(live.index.reconstruct(["doc-1"])[0], reencoded, atol=1e-6)

    query = encoder.encode(["refund card invoice"])
    assert live.index.search(query, 1)[0][0][0] == "new-1"
    assert all(hit != "doc-2" for hit, _ in live.index.search(query, 20)[0])
    fused = hybrid_search(live.index, live.bm25, query, ["refund card invoice"], 5, FusionSettings())
    assert fused[0][0][0] == "new-1" and "doc-2" not in {d for d, _ in fused[0]}
    held = {doc_id: document_text(doc, FIELDS) for doc_id, doc in live.store.documents.items()}
    scratch = IncrementalBM25()
    scratch.index(list(held), list(held.values()))
    (got,), (want,) = live.bm25.search(["vpn refund disk"], 12), scratch.search(["vpn refund disk"], 12)
    assert [d for d, _ in got] == [d for d, _ in want] and [s for _, s in got] == pytest.approx([s for _, s in want])
    assert live.apply(*log.changes_since(0), encoder.encode) == 0  # already in: nothing applied twice
    assert live.summary()["recent_found"] == {"new-1": True, "doc-1": True}


def test_two_replicas_applying_the_log_in_different_steps_agree(encoder: Encoder, tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    index, store = _base(encoder)
    step_by_step = LiveIndex.from_base(index, store, True, 0, MODEL, FIELDS)
    at_once = LiveIndex.from_base(copy.deepcopy(index), copy.deepcopy(store), True, 0, MODEL, FIELDS)
    earlier = "models:/enc/0"  # changes made while another version was served: each replica encodes them itself
    rounds = [[_upsert(encoder, "a", "disk quota")], [Change("delete", "doc-0"), _upsert(encoder, "b", "card charge")],
              [_upsert(encoder, "a", "disk quota snapshot")], [Change("delete", "b")],
              [_upsert(encoder, "c", "vpn", model=earlier)],
              [_upsert(encoder, "d", "refund the card payment twice on the invoice of march", model=earlier),
               _upsert(encoder, "e", "gateway latency after the certificate expired", model=earlier)]]
    for changes in rounds:
        log.append(changes)
        step_by_step.apply(*log.changes_since(step_by_step.seq), encoder.encode)
    at_once.apply(*log.changes_since(0), encoder.encode)  # compacted: the last change of each document
    one, other = step_by_step.summary(), at_once.summary()
    # Bit for bit, also the vectors each encoded itself, in other groupings (one text per forward pass).
    assert one["fingerprint"] == other["fingerprint"] and one["documents"] == other["documents"] == 15
    assert (one["seq"], one["applied"], other["applied"], one["encoded"], other["encoded"]) == (8, 8, 6, 3, 3)
    assert step_by_step.document("b") is None and at_once.document("doc-0") is None
