"""The index follows the champion: a version's index rebuilt from the served documents as the change log has them.

When the alias moves, the new version's vectors differ from the served ones, so its index is built again:
1. the documents as of the change log's committed seq S: the served index's document store (as of its own seq)
   with every later upsert in and every deletion out, streamed into one JSONL corpus (`documents_as_of`);
2. a Ray Data job encodes it with the new version (`retrieval.build.encode_corpus_to_shards`: actors holding
   the model write parquet shards; a collection of up to `IN_PROCESS_ROWS` documents is encoded in this process
   when `live.rebuild_actors` is 1), then FAISS of the served index's kind, BM25 when the served index has it;
3. the folder, with `live.json` {collection, seq: S}, is logged as an artifact of the version's MLflow run and
   the version is tagged with it (`release.LIVE_INDEX_TAG` + collection), where `release_for` finds it.
The hot reload then loads model and index together, and every replica applies the changes after S (made
while the job ran) with the new model before the ingress moves to it (`LiveIndex`): none is dropped.
"""
from __future__ import annotations

import itertools
import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from lmplatform.data.readers import BadRow
from lmplatform.retrieval.build import build_bm25_index, build_index_from_shards, encode_corpus_to_shards
from lmplatform.retrieval.index import META_FILE, IndexParams
from lmplatform.retrieval.settings import MetadataFusionConfig
from lmplatform.retrieval.store import DOCUMENTS_FILE, MetadataAudit, store_records
from lmplatform.serving.changelog import Change
from lmplatform.serving.live import LIVE_FILE, index_seq
from lmplatform.serving.release import (
    LIVE_INDEX_TAG,
    Release,
    ReleaseError,
    cache_root,
    collection_for,
    fetch,
    has_bm25,
    publish_index,
)
from lmplatform.serving.settings import ServeSettings


@dataclass
class RebuildResult:
    version: str
    seq: int  # the change log's seq the index holds every change up to
    documents: int
    encode_seconds: float
    seconds: float
    artifact: str
    imported: Optional[ImportCount] = None  # a bulk import's counts

    def summary(self) -> str:
        how = "built from an import" if self.imported else "rebuilt"
        return (f"index of version {self.version} {how} as of change {self.seq}: {self.documents} documents "
                f"(encoded in {self.encode_seconds:.1f}s, {self.seconds:.1f}s in all), logged as {self.artifact}")


def served_records(store_file: Path, changes: list[Change]) -> Iterator[dict[str, Any]]:
    """The store's documents with `changes` applied (the last change of each changed document), read line by line."""
    changed = {change.id for change in changes}
    rows = (row for row in map(json.loads, store_file.open(encoding="utf-8")) if str(row.get("id")) not in changed)
    upserts = ({"id": c.id, "title": c.title, "text": c.text, "label": c.label, "metadata": c.metadata}
               for c in changes if c.op == "upsert")
    return itertools.chain(rows, upserts)


def write_documents(records: Iterable[dict[str, Any]], out: Path) -> int:
    """Write `records` into the folder `out`: `documents.jsonl` (the new index's store: id, title, text, label,
    metadata) and `texts.jsonl` (id, title, text, all strings: what Ray Data reads and encodes); returns how many."""
    written = 0
    with (out / DOCUMENTS_FILE).open("w", encoding="utf-8") as store, (out / "texts.jsonl").open("w", encoding="utf-8") as texts:
        for row in records:
            doc = {"id": str(row["id"]), "title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
            texts.write(json.dumps(doc, ensure_ascii=False) + "\n")
            label, metadata = row.get("label"), row.get("metadata")
            kept = doc | ({"label": str(label)} if label is not None else {}) | ({"metadata": metadata} if metadata else {})
            store.write(json.dumps(kept, ensure_ascii=False) + "\n")
            written += 1
    return written


def documents_as_of(store_file: Path, changes: list[Change], out: Path) -> int:
    """The served documents as of the changes, written into `out` (`write_documents`)."""
    return write_documents(served_records(store_file, changes), out)


@dataclass(frozen=True)
class BulkImport:
    """A whole export loaded as the collection's documents (`lmp serve import`): its reports, each as the importer
    writes them (id, title, description and metadata fields: `lmp data import`), replace every served copy of the
    same id; the served documents it lacks are kept, or dropped with `replace`. A document's text is its non-empty
    `text_fields` joined with '. '."""

    corpus: str
    id_field: str = "id"
    text_fields: tuple[str, ...] = ("text", "description")
    label_field: Optional[str] = None
    metadata_fields: Optional[tuple[str, ...]] = None  # None: those the served version's metadata fusion reads
    replace: bool = False


@dataclass
class ImportCount:
    """What a bulk import read: reports imported, served documents kept beside them, and rows skipped with why."""

    imported: int = 0
    kept: int = 0
    duplicates: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)
    audit: MetadataAudit = field(default_factory=MetadataAudit)

    def line(self) -> str:
        skipped = [f"{self.duplicates} repeated ids (the first kept)"] if self.duplicates else []
        skipped += [f"{len(self.bad_rows)} unreadable rows (first: {self.bad_rows[0]})"] if self.bad_rows else []
        metadata = f"; metadata: {self.audit.line()}" if self.audit.documents else ""
        return (f"{self.imported} reports imported, {self.kept} served documents kept beside them"
                + (f"; skipped {', '.join(skipped)}" if skipped else "") + metadata)


def imported_documents(bulk: BulkImport, store_file: Path, changes: list[Change], out: Path,
                       fusion: Optional[MetadataFusionConfig] = None) -> ImportCount:
    """Write the export's reports (the first of each id) and, unless `bulk.replace`, the served documents as of
    `changes` that the export lacks into `out` (`write_documents`). `fusion`: the served metadata fusion's config,
    whose fields are kept when `bulk.metadata_fields` is None and whose time field is read as a time."""
    fields = bulk.metadata_fields if bulk.metadata_fields is not None else tuple(fusion.read_fields() if fusion else ())
    time_field = (fusion or MetadataFusionConfig()).time_field
    count = ImportCount(audit=MetadataAudit(time_fields=[f for f in fields if f == time_field]))
    ids: set[str] = set()

    def reports() -> Iterator[dict[str, Any]]:
        for record in store_records(bulk.corpus, bulk.id_field, text_fields=bulk.text_fields, label_field=bulk.label_field,
                                    metadata_fields=fields, audit=count.audit, bad_rows=count.bad_rows):
            if record["id"] in ids:
                count.duplicates += 1
                continue
            ids.add(record["id"])
            count.imported += 1
            yield record

    def kept() -> Iterator[dict[str, Any]]:
        for record in served_records(store_file, changes):
            if str(record["id"]) not in ids:
                count.kept += 1
                yield record

    write_documents(itertools.chain(reports(), () if bulk.replace else kept()), out)
    return count


def rebuild_index(settings: ServeSettings, served: Release, target: Release, writer: Any,
                  progress: Optional[Callable[[str], None]] = None, bulk: Optional[BulkImport] = None) -> RebuildResult:
    """Build `target`'s index from the documents `served` holds now (see the module doc) and log it with the version;
    with `bulk`, from an export's reports and the served documents it lacks (`imported_documents`).

    writer: a handle to the app's ChangeLogWriter (the changes after the served index's seq come from it)."""
    import ray
    from mlflow.tracking import MlflowClient

    say = progress or (lambda _line: None)
    if settings.index:
        raise ReleaseError(f"index: the app serves the folder {settings.index} as it is; a rebuilt index is logged with "
                           "the model version, which the app serves when `index` is not set")
    if target.registered_name is None or target.run_id is None:
        raise ReleaseError(f"model: {target.model_uri} is a folder, not a registered version: a rebuilt index is logged "
                           "with a version's MLflow run (serve models:/<name>@<alias>)")
    free = ray.available_resources().get("CPU", 0.0)
    if free < settings.live.rebuild_cpus:
        raise ReleaseError(f"live.rebuild_cpus: a rebuild actor needs {settings.live.rebuild_cpus} CPU and the cluster has "
                           f"{free:.2f} free beside the application; lower it, or give the replicas fewer CPUs")
    collection = collection_for(settings)
    start = time.perf_counter()
    folder = fetch(served.index_uri, served.tracking_uri, settings.cache_dir)
    _, base_seq = index_seq(folder)
    committed, changes = writer.changes_since.remote(base_seq).result()
    work = Path(tempfile.mkdtemp(prefix=f"rebuild-{collection}-{committed}-", dir=_work_root(settings)))
    try:
        store = Path(served.documents) if served.documents else folder / DOCUMENTS_FILE
        fusion = target.search.metadata_fusion.config if target.search and target.search.metadata_fusion else None
        imported = imported_documents(bulk, store, changes, work, fusion) if bulk else None
        if imported is None:
            count = documents_as_of(store, changes, work)
            say(f"rebuild: {count} documents as of change {committed} (the served index's {base_seq} and "
                f"{len(changes)} changed documents), encoding them with {target.model_uri}")
        else:
            if imported.imported == 0:  # an export that reads as empty is a mistake, never a request to re-index
                raise ReleaseError(f"{bulk.corpus}: no report was read (a row needs {bulk.id_field!r}); nothing "
                                   f"imported ({imported.line()})")
            count = imported.imported + imported.kept
            say(f"import: {imported.line()}, as of change {committed}; encoding {count} documents with "
                f"{target.model_uri}")
        model = fetch(target.model_uri, target.tracking_uri, settings.cache_dir)
        live, index_dir, texts = settings.live, work / "index", str(work / "texts.jsonl")
        # Encoded as the replicas encode (their backend, quantization and precision; 'auto' chooses on the
        # rebuild actor's host): an index is best searched with queries encoded the way it was built.
        encoder = settings.encoder
        encoded = encode_corpus_to_shards(texts, work / "shards", str(model), list(live.fields), "id", live.rebuild_actors,
                                          live.rebuild_cpus, live.rebuild_batch_size, quantize=encoder.quantize,
                                          precision=encoder.precision, backend=encoder.backend, auto_int8=encoder.auto_int8)
        kind = json.loads((folder / META_FILE).read_text())["kind"]
        index = build_index_from_shards(work / "shards", index_dir, IndexParams(kind=kind))
        if has_bm25(folder):
            build_bm25_index(texts, index_dir, list(live.fields), "id", index.ids)
        shutil.copy(work / DOCUMENTS_FILE, index_dir / DOCUMENTS_FILE)
        (index_dir / LIVE_FILE).write_text(json.dumps({"collection": collection, "seq": committed}))
        # an import gets its own folder: a new index at an unchanged seq must not be a cached one
        artifact = f"live-index/{collection}/{committed}" + (f"-import-{time.time_ns()}" if bulk else "")
        publish_index(index_dir, target.run_id, target.tracking_uri, artifact)
        MlflowClient(target.tracking_uri).set_model_version_tag(
            target.registered_name, str(target.version), f"{LIVE_INDEX_TAG}{collection}",
            json.dumps({"artifact": artifact, "seq": committed}))
        return RebuildResult(str(target.version), committed, len(index), encoded.seconds, time.perf_counter() - start,
                             f"runs:/{target.run_id}/{artifact}", imported)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _work_root(settings: ServeSettings) -> str:
    root = cache_root(settings.cache_dir) / "rebuild"
    root.mkdir(parents=True, exist_ok=True)
    return str(root)
