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


def test_a_loaded_store_shares_repeated_metadata_strings_and_keeps_long_ones_whole(tmp_path: Path) -> None:
    """A tracker's 10^6 documents repeat a few products and components: one copy of each string, not one per line."""
    long_value = "x" * 200
    rows = [{"id": str(n), "text": f"report {n}", "label": "bug",
             "metadata": {"product": "Writer", "component": f"c{n % 2}", "note": long_value, "created": 979_084_800 + n}}
            for n in range(4)]
    path = tmp_path / "documents.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs = list(DocumentStore.load(path).documents.values())
    first, third = docs[0], docs[2]
    assert first.metadata == rows[0]["metadata"] and third.metadata == rows[2]["metadata"]
    assert first.metadata["product"] is third.metadata["product"] and first.metadata["component"] is third.metadata["component"]
    assert all(a is b for a, b in zip(first.metadata, third.metadata))  # the keys
    assert first.label is third.label == "bug"
    assert first.metadata["note"] == long_value and first.time("created") == 979_084_800
    assert not hasattr(first, "__dict__")  # slots: no dict per document


def test_metadata_a_fusion_cannot_read_is_counted_with_examples(tmp_path: Path, caplog) -> None:
    """No silent loss: a time that does not parse is stored but counted (it reads as unknown), a list is left out and
    counted; a missing value is counted apart. The build's summary and log line carry both, per field."""
    import logging

    from lmplatform.retrieval.store import MetadataAudit, unknown_metadata

    rows = [{"id": "ok", "text": "a", "product": "Writer", "created": "2001-01-10T09:30:00Z"},
            {"id": "epoch", "text": "b", "product": "Calc", "created": 979_084_800},
            {"id": "bad", "text": "c", "product": ["not", "a", "scalar"], "created": "last tuesday"},
            {"id": "none", "text": "d"}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    audit = MetadataAudit(time_fields=["created"])
    with caplog.at_level(logging.INFO, logger="lmplatform.retrieval.store"):
        written = write_document_store(corpus, tmp_path / "documents.jsonl", metadata_fields=["product", "created"],
                                       audit=audit)
    assert written == 4
    assert audit.summary() == {"documents": 4, "missing": {"created": 1, "product": 1},
                               "unreadable": {"created": {"count": 1, "examples": ['bad: "last tuesday"']},
                                              "product": {"count": 1, "examples": ['bad: ["not", "a", "scalar"]']}}}
    (line,) = [r for r in caplog.records if "metadata of 4 documents" in r.getMessage()]
    assert line.levelno == logging.WARNING and 'created: 1 (e.g. bad: "last tuesday")' in line.getMessage()

    store = DocumentStore.load(tmp_path / "documents.jsonl")
    assert store["bad"].metadata == {"created": "last tuesday"}  # kept as sent; the fusion reads it as unknown
    assert unknown_metadata(store, ["product", "created"], "created") == {
        "product": {"unknown": 2, "examples": []}, "created": {"unknown": 2, "examples": ['bad: "last tuesday"']}}


def test_examples_stop_at_five_and_a_readable_store_says_so() -> None:
    from lmplatform.retrieval.store import MetadataAudit

    audit = MetadataAudit(time_fields=["created"])
    for n in range(8):
        audit.count(f"d{n}", {"created": f"{n} days ago"}, ["created"])
    assert audit.unreadable["created"] == 8 and len(audit.examples["created"]) == 5
    clean = MetadataAudit(time_fields=["created"])
    clean.count("d", {"created": 1.5}, ["created"])
    assert clean.line() == "metadata of 1 documents: every value readable"
