"""The documents a rebuilt index starts from: the store with the change log's last changes applied, metadata kept."""
from __future__ import annotations

import json
from pathlib import Path

from lmplatform.retrieval.store import DocumentStore
from lmplatform.serving.changelog import Change
from lmplatform.serving.rebuild import documents_as_of


def test_documents_as_of_apply_the_changes_and_keep_labels_and_metadata(tmp_path: Path) -> None:
    store = tmp_path / "documents.jsonl"
    rows = [{"id": "a", "title": "t", "text": "kept", "label": "x", "metadata": {"product": "Writer"}},
            {"id": "b", "text": "replaced"}, {"id": "c", "text": "deleted"}]
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    changes = [Change("upsert", "b", "new", "replacement", None, metadata={"product": "Calc", "created": 86_400}),
               Change("delete", "c"), Change("upsert", "d", "", "added")]
    out = tmp_path / "out"
    out.mkdir()
    assert documents_as_of(store, changes, out) == 3
    rebuilt = DocumentStore.load(out / "documents.jsonl")
    assert sorted(rebuilt.documents) == ["a", "b", "d"]
    assert (rebuilt["a"].label, rebuilt["a"].metadata) == ("x", {"product": "Writer"})
    assert (rebuilt["b"].text, rebuilt["b"].metadata) == ("replacement", {"product": "Calc", "created": 86_400})
    assert rebuilt["d"].metadata == {}
    texts = [json.loads(line) for line in (out / "texts.jsonl").open()]
    assert all(set(t) == {"id", "title", "text"} for t in texts)  # what Ray Data encodes: strings only


def _export(tmp_path: Path) -> Path:
    rows = [{"id": "b", "title": "from the export", "text": "exported b", "product": "Writer", "created": "bad date"},
            {"id": "e", "title": "new", "description": "exported e", "product": "Calc", "created": "01/Jan/20 02:52"},
            {"id": "e", "title": "again", "text": "a second copy"}]
    path = tmp_path / "reports.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]) + "{not json\n" + json.dumps(rows[2]) + "\n")
    return path


def test_an_import_replaces_served_copies_keeps_the_rest_and_counts_what_it_skipped(tmp_path: Path) -> None:
    from lmplatform.retrieval.settings import MetadataFusionConfig
    from lmplatform.serving.rebuild import BulkImport, imported_documents

    store = tmp_path / "documents.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in [{"id": "a", "text": "served a"}, {"id": "b", "text": "old b"}]))
    changes = [Change("upsert", "c", "", "live c"), Change("delete", "a")]
    fusion = MetadataFusionConfig(match_fields=["product"], time_field="created")
    merged, replaced = tmp_path / "merged", tmp_path / "replaced"
    merged.mkdir()
    replaced.mkdir()

    count = imported_documents(BulkImport(str(_export(tmp_path))), store, changes, merged, fusion)
    held = DocumentStore.load(merged / "documents.jsonl")
    assert sorted(held.documents) == ["b", "c", "e"]  # a was deleted before the cut; c was upserted live
    assert (held["b"].text, held["b"].metadata) == ("exported b", {"product": "Writer", "created": "bad date"})
    assert held["e"].text == "exported e"  # the first row of a repeated id
    assert (count.imported, count.kept, count.duplicates, len(count.bad_rows)) == (2, 1, 1, 1)
    assert count.audit.unreadable == {"created": 1}  # the fusion's time field, read as a time
    assert "skipped 1 repeated ids (the first kept), 1 unreadable rows (first: " in count.line()

    only = imported_documents(BulkImport(str(_export(tmp_path)), metadata_fields=(), replace=True), store, changes,
                              replaced)
    assert sorted(DocumentStore.load(replaced / "documents.jsonl").documents) == ["b", "e"] and only.kept == 0
    assert DocumentStore.load(replaced / "documents.jsonl")["b"].metadata == {}
