"""Releases without Ray: alias pinning, index artifacts in the model's run, the per-node fetch cache, the store."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.data.readers import DataError
from lmplatform.retrieval.store import DOCUMENTS_FILE, DocumentStore, write_document_store
from lmplatform.serving.release import (
    Release,
    ReleaseError,
    alias_version,
    check_release,
    fetch,
    load_index_and_store,
    publish_index,
    resolve_release,
)


def test_alias_is_pinned_and_the_index_comes_from_the_models_run(tiny_bert: Path, tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.testing.registered import register_with_index
    from tests.serving.servable import make_documents, write_index

    (tmp_path / "mlruns").mkdir(exist_ok=True)
    docs = make_documents(6)
    index_dir = write_index(tiny_bert, docs, tmp_path / "index")
    v1 = register_with_index(mlflow_uri, "enc", tiny_bert, index_dir, alias="champion")
    release = resolve_release("models:/enc@champion", mlflow_uri)
    assert (release.id, release.model_uri, release.version, release.run_id) == ("enc/1", "models:/enc/1", "1", v1.run_id)
    assert release.index_uri == f"runs:/{v1.run_id}/index"

    cache = str(tmp_path / "cache")
    index, store, folder = load_index_and_store(release, cache)
    assert len(index) == len(store) == 6 and store[docs[0]["id"]].label == docs[0]["label"]
    assert fetch(release.index_uri, mlflow_uri, cache) == folder  # second fetch: served from the node cache
    assert (fetch(release.model_uri, mlflow_uri, cache) / "config.json").is_file()

    v2 = register_with_index(mlflow_uri, "enc", tiny_bert, index_dir)
    MlflowClient(mlflow_uri).set_registered_model_alias("enc", "champion", v2.version)
    assert alias_version("models:/enc@champion", mlflow_uri) == "2"
    assert publish_index(index_dir, "models:/enc/1", mlflow_uri, "index-again") == v1.run_id
    with pytest.raises(ReleaseError, match="cannot resolve"):
        resolve_release("models:/enc@nobody", mlflow_uri)


def test_store_must_cover_the_index(tiny_bert: Path, tmp_path: Path) -> None:
    from tests.serving.servable import make_documents, write_index

    docs = make_documents(4)
    index_dir = write_index(tiny_bert, docs, tmp_path / "index")
    (index_dir / DOCUMENTS_FILE).write_text("\n".join(json.dumps(d) for d in docs[:3]) + "\n{broken\n")
    store = DocumentStore.load(index_dir / DOCUMENTS_FILE)
    assert len(store) == 3 and len(store.bad_rows) == 1 and ":4:" in store.bad_rows[0]
    release = resolve_release(str(tiny_bert), index=str(index_dir))
    with pytest.raises(DataError, match="1 of 4 ids"):
        load_index_and_store(release)


def test_write_document_store_joins_text_fields_and_keeps_labels(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": 7, "title": "T", "text": "body", "extra": "more", "component": "db"}) + "\n"
                      + json.dumps({"title": "no id"}) + "\n")
    assert write_document_store(corpus, tmp_path / "docs.jsonl", text_fields=["text", "extra"], label_field="component") == 1
    store = DocumentStore.load(tmp_path / "docs.jsonl")
    assert store["7"].title == "T" and store["7"].text == "body. more" and store.labels == ["db"]


def test_check_release_refuses_an_index_built_with_another_model(tiny_bert: Path, tmp_path: Path) -> None:
    from tests.conftest import write_tiny_bert
    from tests.serving.servable import make_documents, write_index

    index_dir = write_index(tiny_bert, make_documents(4), tmp_path / "index")
    assert check_release(resolve_release(str(tiny_bert), index=str(index_dir))) == {
        "index_size": 4, "documents": 4, "dim": 32, "bm25_documents": 4}
    wider = write_tiny_bert(tmp_path / "wider", hidden=48)
    with pytest.raises(ReleaseError, match="32-d vectors but .* makes 48-d"):
        check_release(resolve_release(str(wider), index=str(index_dir)))


def test_registered_search_settings_travel_in_the_release(tiny_bert: Path, tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.retrieval.settings import SearchSettings
    from lmplatform.testing.registered import register_with_index
    from lmplatform.tracking.registry import SEARCH_SETTINGS_TAG, register_search_settings
    from tests.serving.servable import make_documents, write_index

    (tmp_path / "mlruns").mkdir(exist_ok=True)
    docs = make_documents(6)
    with_bm25 = register_with_index(mlflow_uri, "enc", tiny_bert, write_index(tiny_bert, docs, tmp_path / "index"))
    dense_only = register_with_index(mlflow_uri, "enc", tiny_bert, write_index(tiny_bert, docs, tmp_path / "plain", bm25=False))
    assert resolve_release("models:/enc/1", mlflow_uri).search is None
    hybrid = SearchSettings(mode="hybrid", bm25_weight=0.3, reranker="models:/reranker/2")
    for version in (with_bm25.version, dense_only.version):
        register_search_settings(mlflow_uri, "enc", version, hybrid)
    release = resolve_release("models:/enc/1", mlflow_uri)
    assert release.search == hybrid and Release.model_validate(release.model_dump()) == release  # as replicas get it
    assert check_release(release, str(tmp_path / "cache"))["bm25_documents"] == 6
    with pytest.raises(ReleaseError, match="registered to search in hybrid mode, but the index .* has no bm25/"):
        check_release(resolve_release("models:/enc/2", mlflow_uri), str(tmp_path / "cache"))
    MlflowClient(mlflow_uri).set_model_version_tag("enc", "1", SEARCH_SETTINGS_TAG, '{"mode": "sparse"}')
    with pytest.raises(ReleaseError, match="model: invalid lmp.search_settings of models:/enc/1: mode: Input should be"):
        resolve_release("models:/enc/1", mlflow_uri)
