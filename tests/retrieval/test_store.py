"""The document store keeps each document's metadata: scalars by field name, as the fusion reads them."""
from __future__ import annotations

import json
from pathlib import Path

from lmplatform.retrieval.store import DocumentStore, write_document_store


def test_metadata_fields_are_stored_and_read_back(tmp_path: Path) -> None:
    rows = [{"id": 1, "title": "crash", "text": "writer crashes on save", "product": "Writer", "created": 979_084_800},
            {"id": "2", "text": "calc hangs", "product": ["not", "a", "scalar"], "component": "ui"},
            {"id": 3, "text": "no metadata at all"}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = write_document_store(corpus, tmp_path / "documents.jsonl", metadata_fields=["product", "component", "created"])
    store = DocumentStore.load(tmp_path / "documents.jsonl")
    assert written == 3 and not store.bad_rows
    assert store["1"].metadata == {"product": "Writer", "created": 979_084_800}
    assert store["2"].metadata == {"component": "ui"}  # a list is no value to match on
    assert store["3"].metadata == {} and store["3"].title == ""
    # without metadata_fields the store is as before: no metadata key in its lines
    write_document_store(corpus, tmp_path / "plain.jsonl")
    assert all("metadata" not in json.loads(line) for line in (tmp_path / "plain.jsonl").open())
