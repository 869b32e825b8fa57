"""The MLflow model registry: register a model folder; a version's search settings. (Downloading a registered
model is `models.resolve.download_model`: loading any model goes through it.)"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from lmplatform.retrieval.settings import SearchSettings, SearchSettingsError, parse_search_settings
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.tracking.model_card import try_write_model_card

SEARCH_SETTINGS_TAG = "lmp.search_settings"  # model-version tag: the version's SearchSettings as JSON


def register_model_version(
    tracking_uri: str, name: str, source: str, run_id: str, tags: Optional[dict[str, Any]] = None, description: str = ""
) -> str:
    """Create a version of `name` from an artifact URI holding a Hugging Face folder, with its MODEL_CARD.md."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code) and "already exists" not in str(exc):
            raise
    version = client.create_model_version(
        name, source=source, run_id=run_id, tags={k: str(v) for k, v in (tags or {}).items()}, description=description
    )

    try_write_model_card(tracking_uri, name, str(version.version))  # every version has a card from the start
    return str(version.version)


def register_search_settings(tracking_uri: Optional[str], name: str, version: str | int,
                             settings: SearchSettings | Mapping[str, Any]) -> SearchSettings:
    """Validate `settings` and attach them to model version `name`/`version` (its `lmp.search_settings` tag,
    replacing earlier ones); returns the validated settings.

    Call it once the settings are chosen on a dev split, e.g. after `choose_bm25_weight`:
    `register_search_settings(uri, "lmplatform-biencoder", "3", SearchSettings(mode="hybrid", bm25_weight=0.2))`.
    `lmp serve` then answers /v1/search with them by default, and deploys their `reranker` when the serve
    settings name none. Hybrid mode needs a BM25 index beside the version's FAISS index (ray_jobs/build_index.py
    saves one by default); the service refuses hybrid requests naming `mode` when it is missing.
    Raises SearchSettingsError naming a bad field, MlflowException for an unknown version.
    """
    from mlflow.tracking import MlflowClient

    valid = settings if isinstance(settings, SearchSettings) else parse_search_settings(settings)
    client = MlflowClient(resolve_tracking_uri(tracking_uri))
    client.set_model_version_tag(name, str(version), SEARCH_SETTINGS_TAG, json.dumps(valid.model_dump(mode="json")))
    return valid


def read_search_settings(tracking_uri: Optional[str], name: str, version: str | int) -> Optional[SearchSettings]:
    """The search settings registered with model version `name`/`version`, or None when it has none."""
    from mlflow.tracking import MlflowClient

    found = MlflowClient(resolve_tracking_uri(tracking_uri)).get_model_version(name, str(version))
    return search_settings_from_tags(found.tags, f"models:/{name}/{version}")


def search_settings_from_tags(tags: Mapping[str, str], where: str) -> Optional[SearchSettings]:
    """A model version's registered settings from its tags (None without the tag); a bad tag names itself."""
    raw = tags.get(SEARCH_SETTINGS_TAG)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise SearchSettingsError(f"{where}: tag {SEARCH_SETTINGS_TAG} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SearchSettingsError(f"{where}: tag {SEARCH_SETTINGS_TAG} must be a JSON object, got {type(data).__name__}")
    return parse_search_settings(data, f"{SEARCH_SETTINGS_TAG} of {where}")
