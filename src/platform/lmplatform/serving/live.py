"""One release's index in a retriever replica as the change log moves it: vectors, BM25, documents, applied seq.

A release's index folder was built as of a sequence number of the change log (`live.json`: {collection, seq};
an index built outside the log, by ray_jobs/build_index.py, is as of 0: the base corpus). A replica applies
every change after it, in order, before it answers a request that reads the index (`RetrieverDeployment`
asks the writer for them first), so a search that starts after a change's acknowledgement sees it, on
every replica. An upsert's vector is the one stored in the log when it was encoded by this release's
model; a change encoded by another model (made while another version was served) is encoded again here, by
this one, alone in its forward pass (so every replica gets the same bits), and an index never mixes two
models' vectors.

`LiveIndex` is also the spy the tests read: `applied` counts the changes applied, and `summary()` has a
fingerprint of every document the log touched (its id and vector, or that it is deleted), equal on two
replicas exactly when they hold the same documents with the same vectors.
"""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from lmplatform.data.fields import join_fields
from lmplatform.retrieval.incremental_bm25 import IncrementalBM25
from lmplatform.retrieval.index import VectorIndex
from lmplatform.retrieval.store import DocumentStore, StoredDocument, shared_metadata
from lmplatform.serving.changelog import Change

RECENT = 8
LIVE_FILE = "live.json"  # in an index folder built from the change log: {"collection", "seq"}


def index_seq(folder: Path) -> tuple[Optional[str], int]:
    """(collection, seq) an index folder was built as of; (None, 0) for one built outside the change log."""
    path = folder / LIVE_FILE
    if not path.is_file():
        return None, 0
    meta = json.loads(path.read_text())
    return str(meta["collection"]), int(meta["seq"])


def document_text(doc: dict[str, Any] | StoredDocument, fields: Sequence[str]) -> str:
    """What is encoded and BM25-indexed of a document: `fields` joined with '. ' (as build_index joins them)."""
    values = doc if isinstance(doc, dict) else {"title": doc.title, "text": doc.text}
    return join_fields(values, list(fields))


class LiveIndex:
    """A release's VectorIndex, BM25 and document store, kept at the change log's sequence number `seq`.

    Every read (`hold()`) and every `apply` takes the same lock: a search never sees half a change.
    """

    def __init__(self, index: VectorIndex, store: DocumentStore, bm25: Optional[IncrementalBM25], seq: int,
                 vector_model: str, fields: Sequence[str]):
        self.index, self.store, self.bm25 = index, store, bm25
        self.seq, self.base_seq = seq, seq
        self.vector_model, self.fields = vector_model, list(fields)
        self.applied = 0  # changes applied since the index was loaded
        self.encoded = 0  # of them, upserts encoded here (their vector was another model's)
        self.touched: dict[str, bool] = {}  # id -> held now, for every document the applied changes touched
        self.recent: list[str] = []  # the last upserts applied, newest first (`summary` searches for them)
        self.label_counts = Counter(d.label for d in store.documents.values() if d.label is not None)
        self.lock = threading.RLock()

    @classmethod
    def from_base(cls, index: VectorIndex, store: DocumentStore, with_bm25: bool, seq: int, vector_model: str,
                  fields: Sequence[str]) -> "LiveIndex":
        """A live index over a loaded base: BM25, when the release has one, is indexed again from the store's texts
        (`IncrementalBM25`: bm25s's scores, but it can change)."""
        bm25 = None
        if with_bm25:
            bm25 = IncrementalBM25()
            ids = index.held_ids()
            bm25.index(ids, [document_text(store[i], fields) for i in ids])
        return cls(index, store, bm25, seq, vector_model, fields)

    @property
    def labels(self) -> list[str]:
        return sorted(label for label, count in self.label_counts.items() if count > 0)

    def apply(self, committed: int, changes: Sequence[Change], encode: Callable[[list[str]], np.ndarray]) -> int:
        """Bring the index to `committed`, given the last change of every document changed after some seq <= ours
        (`ChangeLog.changes_since`); changes at or below `seq` are already in. Returns how many were applied."""
        with self.lock:
            pending = [c for c in changes if c.seq > self.seq]
            if pending:
                self._apply(pending, encode)
            self.seq = max(self.seq, committed)
            return len(pending)

    def _apply(self, changes: list[Change], encode: Callable[[list[str]], np.ndarray]) -> None:
        upserts = [c for c in changes if c.op == "upsert"]
        vectors = np.zeros((len(upserts), self.index.dim), dtype=np.float32)
        foreign = [n for n, c in enumerate(upserts) if c.model != self.vector_model or c.vector is None]
        for n in sorted(set(range(len(upserts))) - set(foreign)):
            vectors[n] = upserts[n].vector_array()
        if foreign:
            # One text per forward pass: a batch's shape moves the last bits of a vector, and every replica (and every
            # later replay) must compute this change's vector bit for bit as the others do.
            texts = [document_text({"title": upserts[n].title, "text": upserts[n].text}, self.fields) for n in foreign]
            vectors[foreign] = np.concatenate([encode([text]) for text in texts])
        ids = [c.id for c in changes]
        self.index.remove(ids)
        if self.bm25 is not None:
            self.bm25.remove(ids)
        for change in changes:
            old = self.store.documents.pop(change.id, None)
            if old is not None and old.label is not None:
                self.label_counts[old.label] -= 1
        if upserts:
            self.index.add([c.id for c in upserts], vectors, measure_recall=False)
            if self.bm25 is not None:
                self.bm25.add([c.id for c in upserts], [document_text({"title": c.title, "text": c.text}, self.fields)
                                                       for c in upserts])
        for change in upserts:
            # a label is one of few values: one copy each, as the store's loader keeps them
            label = sys.intern(change.label) if change.label is not None else None
            self.store.documents[change.id] = StoredDocument(change.title, change.text, label,
                                                             shared_metadata(change.metadata or {}))
            if change.label is not None:
                self.label_counts[change.label] += 1
        for change in changes:
            self.touched[change.id] = change.op == "upsert"
        self.recent = ([c.id for c in upserts] + self.recent)[:RECENT]
        self.applied += len(changes)
        self.encoded += len(foreign)

    def document(self, doc_id: str) -> Optional[dict[str, Any]]:
        with self.lock:
            doc = self.store.documents.get(doc_id)
            return None if doc is None else {"id": doc_id, "title": doc.title, "text": doc.text, "label": doc.label,
                                             "metadata": dict(doc.metadata)}

    def summary(self) -> dict[str, Any]:
        """Where this index stands: seq, documents held, changes applied (and encoded here), the fingerprint of
        the documents the changes touched (sha256 over sorted ids with their float32 vectors, or 'deleted'), and
        for the last upserts applied whether a search with the document's own vector finds it (top 3)."""
        with self.lock:
            recent = [i for i in self.recent if self.touched.get(i)]
            found = {}
            if recent:
                hits = self.index.search(self.index.reconstruct(recent), 3)
                found = {doc_id: any(hit == doc_id for hit, _ in row) for doc_id, row in zip(recent, hits)}
            digest = hashlib.sha256()
            held = sorted(i for i, present in self.touched.items() if present)
            vectors = self.index.reconstruct(held) if held else np.zeros((0, self.index.dim), dtype=np.float32)
            rows = dict(zip(held, vectors))
            for doc_id in sorted(self.touched):
                digest.update(doc_id.encode("utf-8", "surrogatepass") + b"\0")
                digest.update(rows[doc_id].astype("<f4").tobytes() if doc_id in rows else b"deleted")
            return {"seq": self.seq, "base_seq": self.base_seq, "documents": len(self.index), "applied": self.applied,
                    "encoded": self.encoded, "touched": len(self.touched), "fingerprint": digest.hexdigest()[:16],
                    "recent_found": found}
