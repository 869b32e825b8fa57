"""The document store served next to an index: id -> title, text, (optionally) label and metadata.

It is one JSONL file, `documents.jsonl` in the index folder by default, written
by `write_document_store` when the index is built. Loading checks that every id
of the index has a document, so a hit can always be shown. `metadata` holds the
fields a metadata fusion reads (product, component, created...): JSON scalars by name.

A fusion never fails a search on a stored value it cannot read: it counts as unknown (`metadata_fusion`). So that such
a loss is never silent, writing a store counts, per metadata field, the values it drops (not a scalar) or that do not
parse as a time (`parse_time`, for the time fields), with a few examples (`MetadataAudit`); a service counts the fields
its fusion reads when it loads a store (`unknown_metadata`).
"""
from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from lmplatform.data.fields import join_fields, parse_time
from lmplatform.data.readers import BadRow, DataError, detect_format, read_rows

logger = logging.getLogger(__name__)
DOCUMENTS_FILE = "documents.jsonl"
SCALARS = (str, int, float, bool)
EXAMPLES = 5  # per field, of the values a store lost


@dataclass(slots=True)
class StoredDocument:
    """One document of a store. Slots, and the times dict made on first use: a tracker's store holds 10^6 of them."""

    title: str
    text: str
    label: Optional[str] = None
    metadata: dict[str, Any] = field(default_factory=dict)
    _times: Optional[dict[str, Optional[float]]] = field(default=None, repr=False, compare=False)

    def time(self, name: str) -> Optional[float]:
        """metadata[name] as epoch seconds (`parse_time`; None when missing or unreadable), parsed once per document:
        a windowed search reads the time of every candidate it meets. A changed document is a new StoredDocument."""
        if self._times is None:
            self._times = {}
        if name not in self._times:
            try:
                self._times[name] = parse_time(self.metadata.get(name), name)
            except DataError:
                self._times[name] = None
        return self._times[name]


SHARED_VALUE_CHARS = 64  # metadata strings up to this long are interned: products and components repeat


def shared_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """`metadata` with its keys and short string values interned (one copy per distinct string in the process):
    every JSON line decodes its own copies of "product", "component" and their values."""
    return {sys.intern(str(key)): sys.intern(value) if isinstance(value, str) and len(value) <= SHARED_VALUE_CHARS
            else value for key, value in metadata.items()}


def scalar_fields(row: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The named fields of a row that hold a JSON scalar (a list, an object or a missing field is left out)."""
    return {name: row[name] for name in names if isinstance(row.get(name), SCALARS)}


def readable_time(value: Any) -> bool:
    """Whether a fusion reads `value` as a time (`parse_time`; empty counts as readable: it is missing, not wrong)."""
    try:
        parse_time(value, "")
    except DataError:
        return False
    return True


@dataclass
class MetadataAudit:
    """Per metadata field, the documents whose value a metadata fusion cannot read: a value that is not a JSON scalar
    (left out of the store), or, for a time field, one `parse_time` refuses (stored, read as unknown); and how many
    documents have no value. `examples`: the first EXAMPLES lost values of each field, as 'id: value'."""

    time_fields: Sequence[str] = ()
    documents: int = 0
    missing: Counter = field(default_factory=Counter)
    unreadable: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def count(self, doc_id: str, row: Mapping[str, Any], names: Sequence[str]) -> None:
        self.documents += 1
        for name in names:
            value = row.get(name)
            if value is None or value == "":
                self.missing[name] += 1
            elif not isinstance(value, SCALARS) or (name in self.time_fields and not readable_time(value)):
                self.unreadable[name] += 1
                shown = self.examples.setdefault(name, [])
                if len(shown) < EXAMPLES:
                    shown.append(f"{doc_id}: {json.dumps(value, ensure_ascii=False, default=str)[:80]}")

    def summary(self) -> dict[str, Any]:
        """{field: {unreadable, examples}} of every field that lost a value, and the documents counted."""
        return {"documents": self.documents,
                "unreadable": {name: {"count": n, "examples": self.examples[name]}
                               for name, n in sorted(self.unreadable.items())},
                "missing": dict(sorted(self.missing.items()))}

    def line(self) -> str:
        lost = "; ".join(f"{name}: {n} (e.g. {', '.join(self.examples[name])})" for name, n in sorted(self.unreadable.items()))
        return (f"metadata of {self.documents} documents: " + (f"unreadable values, per field: {lost}" if lost else
                                                                "every value readable"))


def unknown_metadata(store: "DocumentStore", fields: Sequence[str], time_field: Optional[str]) -> dict[str, Any]:
    """Per field a fusion reads, how many documents of `store` it sees without a value: missing, or for `time_field`
    one `parse_time` refuses (with up to EXAMPLES of those, as 'id: value'). One pass over the store."""
    unknown = {name: {"unknown": 0, "examples": []} for name in fields}
    for doc_id, doc in store.documents.items():
        for name, counted in unknown.items():
            value = doc.metadata.get(name)
            if value is None or value == "":
                counted["unknown"] += 1
            elif name == time_field and not readable_time(value):
                counted["unknown"] += 1
                if len(counted["examples"]) < EXAMPLES:
                    counted["examples"].append(f"{doc_id}: {json.dumps(value, ensure_ascii=False)[:80]}")
    return unknown


@dataclass
class DocumentStore:
    documents: dict[str, StoredDocument]
    bad_rows: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, doc_id: str) -> StoredDocument:
        return self.documents[doc_id]

    @property
    def labels(self) -> list[str]:
        """Sorted distinct labels; empty when the store holds none."""
        return sorted({d.label for d in self.documents.values() if d.label is not None})

    @classmethod
    def load(cls, path: str | Path, id_field: str = "id", title_field: str = "title", text_field: str = "text",
             label_field: str = "label") -> "DocumentStore":
        """Read a JSONL/CSV/parquet store; rows without an id or text are skipped and listed as file:line."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"document store not found: {path}")
        documents: dict[str, StoredDocument] = {}
        bad: list[str] = []
        for row in read_rows(str(path), detect_format(path)):
            if isinstance(row, BadRow):
                bad.append(str(row))
                continue
            doc_id, text = row.fields.get(id_field), row.fields.get(text_field)
            if doc_id is None or not isinstance(text, str):
                bad.append(f"{path}:{row.line}: missing {id_field!r} or text field {text_field!r}")
                continue
            label, metadata = row.fields.get(label_field), row.fields.get("metadata")
            documents[str(doc_id)] = StoredDocument(
                title=str(row.fields.get(title_field) or ""), text=text,
                label=None if label is None or isinstance(label, (list, dict)) else sys.intern(str(label)),
                metadata=shared_metadata(scalar_fields(metadata, list(metadata))) if isinstance(metadata, dict) else {},
            )
        return cls(documents, bad)

    def check_covers(self, ids: Sequence[str], where: str) -> None:
        missing = [i for i in ids if i not in self.documents]
        if missing:
            raise DataError(f"{len(missing)} of {len(ids)} ids of the index at {where} have no document in the store, "
                            f"e.g. {missing[:3]}")


def store_records(corpus: str | Path | Iterable[str | Path], id_field: str = "id", title_field: str = "title",
                  text_fields: Sequence[str] = ("text",), label_field: Optional[str] = None,
                  metadata_fields: Sequence[str] = (), audit: Optional[MetadataAudit] = None,
                  bad_rows: Optional[list[BadRow]] = None) -> Iterator[dict[str, Any]]:
    """A corpus's rows as store records: id, title, text (text fields joined with '. '), label and the
    `metadata_fields` that hold a scalar. Rows without an id are skipped; unreadable rows are skipped and kept in
    `bad_rows` (when given); the metadata values a fusion cannot read are counted into `audit`."""
    paths = [corpus] if isinstance(corpus, (str, Path)) else list(corpus)
    for path in paths:
        for row in read_rows(str(path), detect_format(path)):
            if isinstance(row, BadRow):
                if bad_rows is not None:
                    bad_rows.append(row)
                continue
            if row.fields.get(id_field) is None:
                continue
            record = {"id": str(row.fields[id_field]), "title": str(row.fields.get(title_field) or ""),
                      "text": join_fields(row.fields, list(text_fields))}
            if label_field and row.fields.get(label_field) is not None:
                record["label"] = str(row.fields[label_field])
            if metadata := scalar_fields(row.fields, metadata_fields):
                record["metadata"] = metadata
            if metadata_fields and audit is not None:
                audit.count(record["id"], row.fields, metadata_fields)
            yield record


def write_document_store(corpus: str | Path | Iterable[str | Path], out_file: str | Path, id_field: str = "id",
                         title_field: str = "title", text_fields: Sequence[str] = ("text",),
                         label_field: Optional[str] = None, metadata_fields: Sequence[str] = (),
                         audit: Optional[MetadataAudit] = None) -> int:
    """Copy a corpus's `store_records` into a store; returns rows written. The metadata values a fusion cannot read
    are counted into `audit` (`MetadataAudit`: its time_fields are read as times) and logged."""
    audit = audit if audit is not None else MetadataAudit()
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with out_file.open("w", encoding="utf-8") as handle:
        for record in store_records(corpus, id_field, title_field, text_fields, label_field, metadata_fields, audit):
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
    if metadata_fields:
        (logger.warning if audit.unreadable else logger.info)("%s: %s", out_file, audit.line())
    return written
