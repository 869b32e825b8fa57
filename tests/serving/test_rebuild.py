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
