"""A *release*: one pinned model version and the index built with it, as every replica loads it.

`resolve_release` turns what the user names (`models:/name@champion`, a version, a
folder) into a `Release` pinned to a concrete version, so that all replicas load
the same thing even if the alias moves while they start. A registered version's
search settings (`tracking.registry.register_search_settings`) are read then too
and travel in the release: they are how `/v1/search` answers by default. The release travels to
the replicas in their Serve `user_config`; each replica fetches the files itself
(`fetch`), through a per-node cache, so this works on a multi-node cluster.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, ConfigDict

from lmplatform.models.resolve import download_model, resolve_model_path
from lmplatform.retrieval.index import INDEX_FILE, META_FILE, VectorIndex
from lmplatform.retrieval.retrievers import BM25_DIR, BM25_META_FILE, BM25Retriever
from lmplatform.retrieval.settings import SearchSettings, SearchSettingsError
from lmplatform.retrieval.store import DOCUMENTS_FILE, DocumentStore
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.serving.changelog import ensure_collection
from lmplatform.serving.live import index_seq
from lmplatform.serving.settings import ServeConfigError
from lmplatform.tracking.registry import search_settings_from_tags

if TYPE_CHECKING:
    from lmplatform.serving.settings import ServeSettings


LIVE_INDEX_TAG = "lmp.live_index."  # + collection: {"artifact", "seq"} of the index a rebuild logged for the version


class ReleaseError(ValueError):
    """A model or index that cannot be resolved or loaded (the message says which and why)."""


class Release(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    model_uri: str  # models:/name/<version> (pinned) or an absolute folder
    index_uri: str  # runs:/<run_id>/<artifact> or an absolute folder
    documents: Optional[str] = None  # absolute path; None: documents.jsonl in the index folder
    tracking_uri: Optional[str] = None
    registered_name: Optional[str] = None
    version: Optional[str] = None
    alias: Optional[str] = None
    run_id: Optional[str] = None
    resolved_at: float = 0.0
    search: Optional[SearchSettings] = None  # registered with the version; None: dense, no re-ranker
    live_seq: Optional[int] = None  # an index rebuilt from the change log (`rebuild`): the seq it was built as of


def _folder_stamp(path: Path) -> str:
    """Changes when the files in `path` change, so a reload of a rewritten folder is a new release."""
    stamps = sorted(f"{p.name}:{p.stat().st_mtime_ns}:{p.stat().st_size}" for p in path.iterdir() if p.is_file())
    return hashlib.sha256("|".join(stamps).encode()).hexdigest()[:12]


def collection_for(settings: "ServeSettings") -> Optional[str]:
    """The collection id of the settings' change log (None with live updates off)."""
    try:
        return ensure_collection(settings.live.dir) if settings.live.dir else None
    except OSError as exc:
        raise ServeConfigError(f"live.dir: cannot use {settings.live.dir} for the change log: {exc}") from exc


def release_for(settings: "ServeSettings") -> Release:
    """The release the serve settings name now (with live updates on, the version's index for their change log)."""
    return resolve_release(settings.model, settings.tracking_uri, settings.index, settings.documents,
                           settings.index_artifact, collection_for(settings))


def resolve_release(model: str, tracking_uri: Optional[str] = None, index: Optional[str] = None,
                    documents: Optional[str] = None, index_artifact: str = "index",
                    live_collection: Optional[str] = None) -> Release:
    """Pin `model` (alias -> version) and find its index; raises `ReleaseError` naming what is missing.

    live_collection: the change log the app follows; a registered version's index rebuilt from it (`rebuild`,
    tagged `LIVE_INDEX_TAG` + collection) is then preferred to the run's `index_artifact`."""
    index_path = Path(index).expanduser().resolve() if index else None
    if index_path is not None and not (index_path / INDEX_FILE).is_file():
        raise ReleaseError(f"index: {index_path} is not a saved VectorIndex ({INDEX_FILE} is missing); "
                           "build one with ray_jobs/build_index.py")
    docs = str(Path(documents).expanduser().resolve()) if documents else None
    if docs and not Path(docs).is_file():
        raise ReleaseError(f"documents: {docs} does not exist")
    if model.startswith("models:/"):
        uri = resolve_tracking_uri(tracking_uri)
        name, alias, found = _pin_registry_version(model, uri)
        version, run_id = str(found.version), found.run_id
        index_uri = str(index_path) if index_path else f"runs:/{run_id}/{index_artifact}"
        stamp = _folder_stamp(index_path) if index_path else ""
        live_index = (found.tags or {}).get(f"{LIVE_INDEX_TAG}{live_collection}") if live_collection else None
        live_seq = None
        if live_index and not index_path:
            built = json.loads(live_index)
            live_seq = int(built["seq"])
            # live<seq>, or live<seq>-import-<n> for a bulk import (a new index at an unchanged seq)
            index_uri, stamp = f"runs:/{run_id}/{built['artifact']}", f"live{built['artifact'].rsplit('/', 1)[-1]}"
        return Release(id=f"{name}/{version}" + (f"+{stamp}" if stamp else ""), model_uri=f"models:/{name}/{version}",
                       index_uri=index_uri, documents=docs, tracking_uri=uri, registered_name=name, version=version,
                       alias=alias, run_id=run_id, resolved_at=time.time(), search=_registered_search(found, name),
                       live_seq=live_seq)
    try:
        folder = resolve_model_path(model)
    except FileNotFoundError as exc:
        raise ReleaseError(f"model: {exc}") from exc
    if index_path is None:
        raise ReleaseError(f"index: model {model!r} is a folder, not a registered version, so the index cannot be "
                           "found in its MLflow run; pass index=<folder of a saved VectorIndex>")
    return Release(id=f"path:{folder.name}+{_folder_stamp(folder)}+{_folder_stamp(index_path)}", model_uri=str(folder),
                   index_uri=str(index_path), documents=docs, resolved_at=time.time())


def _registered_search(found: Any, name: str) -> Optional[SearchSettings]:
    try:
        return search_settings_from_tags(found.tags or {}, f"models:/{name}/{found.version}")
    except SearchSettingsError as exc:
        raise ReleaseError(f"model: {exc}") from None


def _pin_registry_version(model_uri: str, tracking_uri: str) -> tuple[str, Optional[str], Any]:
    """(name, alias or None, the MLflow ModelVersion) of models:/name@alias or models:/name/version."""
    from mlflow.tracking import MlflowClient

    spec = model_uri[len("models:/"):]
    client = MlflowClient(tracking_uri)
    try:
        if "@" in spec:
            name, alias = spec.split("@", 1)
            found = client.get_model_version_by_alias(name, alias)
        else:
            name, _, number = spec.partition("/")
            alias = None
            if not number:
                raise ReleaseError(f"model: {model_uri}: expected models:/<name>@<alias> or models:/<name>/<version>")
            found = client.get_model_version(name, number)
    except ReleaseError:
        raise
    except Exception as exc:
        raise ReleaseError(f"model: cannot resolve {model_uri} in the MLflow registry at {tracking_uri}: {exc}") from exc
    if not found.run_id:
        raise ReleaseError(f"model: {model_uri} (version {found.version}) has no MLflow run, so it has no index artifact")
    return name, alias, found


def alias_version(model_uri: str, tracking_uri: Optional[str]) -> Optional[str]:
    """The version an alias points at now (None for a path or a pinned version)."""
    if not model_uri.startswith("models:/") or "@" not in model_uri:
        return None
    return str(_pin_registry_version(model_uri, resolve_tracking_uri(tracking_uri))[2].version)


def cache_root(configured: Optional[str] = None) -> Path:
    return Path(configured or os.environ.get("LMP_SERVE_CACHE") or Path.home() / ".cache" / "lmplatform" / "serve")


def fetch(uri: str, tracking_uri: Optional[str], cache_dir: Optional[str] = None) -> Path:
    """A local folder for a folder path, `models:/name/version` or `runs:/id/path` (downloaded once per node)."""
    if not (uri.startswith("models:/") or uri.startswith("runs:/")):
        path = Path(uri)
        if not path.is_dir():
            raise ReleaseError(f"{uri} is not a folder on this node")
        return path
    key = hashlib.sha256(f"{tracking_uri}|{uri}".encode()).hexdigest()[:20]
    target = cache_root(cache_dir) / key
    if (target / ".complete").is_file():
        return target / "content"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=target.parent))
    try:
        if uri.startswith("models:/"):
            local = download_model(uri, tracking_uri, dst=staging / "download")
        else:
            import mlflow.artifacts

            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(staging / "download"),
                                                             tracking_uri=tracking_uri))
        local.rename(staging / "content")
        (staging / ".complete").write_text(uri)
        try:
            staging.rename(target)  # atomic: a concurrent replica on this node either wins or finds it complete
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    except Exception as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, ReleaseError):
            raise
        raise ReleaseError(f"cannot fetch {uri} from MLflow at {tracking_uri}: {exc}") from exc
    return target / "content"


def load_index_and_store(release: Release, cache_dir: Optional[str] = None) -> tuple[VectorIndex, DocumentStore, Path]:
    """The release's VectorIndex and document store; every index id must have a document."""
    folder = fetch(release.index_uri, release.tracking_uri, cache_dir)
    if not (folder / INDEX_FILE).is_file() or not (folder / META_FILE).is_file():
        raise ReleaseError(f"{release.index_uri} holds no saved VectorIndex ({INDEX_FILE}, {META_FILE})")
    index = VectorIndex.load(folder)
    documents = Path(release.documents) if release.documents else folder / DOCUMENTS_FILE
    if not documents.is_file():
        raise ReleaseError(f"no document store for the index at {release.index_uri}: {documents} is missing "
                           "(write it with lmplatform.retrieval.store.write_document_store, or pass documents=)")
    store = DocumentStore.load(documents)
    store.check_covers(index.ids, release.index_uri)
    return index, store, folder


def has_bm25(folder: Path) -> bool:
    """Whether an index folder has a BM25 index beside the vectors (`BM25_DIR`, written by build_index)."""
    return (folder / BM25_DIR / BM25_META_FILE).is_file()


def load_bm25(folder: Path, index: VectorIndex) -> Optional[BM25Retriever]:
    """The BM25 index saved beside a VectorIndex (`BM25_DIR`, written by build_index), or None when there is none.

    It must hold exactly the index's ids: hybrid search looks every candidate up in both.
    """
    if not has_bm25(folder):
        return None
    bm25 = BM25Retriever.load(folder / BM25_DIR)
    if set(bm25.ids) != set(index.ids):
        raise ReleaseError(f"{folder / BM25_DIR} indexes {len(bm25.ids)} documents, the vector index {len(index)} other ones: "
                           "rebuild both with ray_jobs/build_index.py")
    return bm25


def publish_index(index_dir: str | Path, run_id_or_model: str, tracking_uri: Optional[str] = None,
                  artifact_path: str = "index") -> str:
    """Log a built index folder as an artifact of a run (a run id, or the run of `models:/...`); returns the run id.

    This is where `resolve_release` looks for a registered model's index.
    """
    from mlflow.tracking import MlflowClient

    index_dir = Path(index_dir)
    if not (index_dir / INDEX_FILE).is_file():
        raise ReleaseError(f"{index_dir} is not a saved VectorIndex ({INDEX_FILE} is missing)")
    if not (index_dir / DOCUMENTS_FILE).is_file():
        raise ReleaseError(f"{index_dir} has no {DOCUMENTS_FILE}: the service could not show its hits")
    uri = resolve_tracking_uri(tracking_uri)
    run_id = _pin_registry_version(run_id_or_model, uri)[2].run_id if run_id_or_model.startswith("models:/") else run_id_or_model
    MlflowClient(uri).log_artifacts(run_id, str(index_dir), artifact_path)
    return run_id


def check_release(release: Release, cache_dir: Optional[str] = None, live_collection: Optional[str] = None) -> dict[str, int]:
    """Fetch and check a release before any replica is told to load it (the files land in the node cache).

    Catches what would otherwise fail inside every replica: a missing model or index
    artifact, an index whose ids lack documents, or an index built with a model of
    another width (its vectors could never match the queries).
    """
    index, store, folder = load_index_and_store(release, cache_dir)
    built_from, _ = index_seq(folder)
    if live_collection and built_from not in (None, live_collection):
        raise ReleaseError(f"the index at {release.index_uri} was built from the change log of collection {built_from}, "
                           f"not the one in live.dir ({live_collection}): its changes cannot be replayed onto it")
    bm25 = load_bm25(folder, index)
    if bm25 is None and release.search is not None and release.search.mode in ("hybrid", "metadata"):
        raise ReleaseError(f"{release.model_uri} is registered to search in {release.search.mode} mode, but the index at "
                           f"{release.index_uri} has no {BM25_DIR}/ (build it with ray_jobs/build_index.py without --no-bm25)")
    fusion = release.search.metadata_fusion if release.search is not None else None
    if fusion is not None:
        read = set(fusion.config.read_fields())
        if not any(read & doc.metadata.keys() for doc in store.documents.values()):
            raise ReleaseError(f"{release.model_uri} is registered with a metadata fusion that reads {sorted(read)}, but no "
                               f"document of the index at {release.index_uri} has any of them (build it with "
                               "ray_jobs/build_index.py --metadata-fields)")
    model_dir = fetch(release.model_uri, release.tracking_uri, cache_dir)
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise ReleaseError(f"{release.model_uri} holds no Hugging Face model folder (config.json is missing)")
    width = json.loads(config_file.read_text()).get("hidden_size")
    if width is not None and int(width) != index.dim:
        raise ReleaseError(f"the index at {release.index_uri} holds {index.dim}-d vectors but {release.model_uri} "
                           f"makes {width}-d ones: rebuild the index with this model (ray_jobs/build_index.py)")
    return {"index_size": len(index), "documents": len(store), "dim": index.dim, "bm25_documents": len(bm25.ids) if bm25 else 0}
