"""A model version's search settings in the MLflow registry: written once chosen, read back, bad ones named."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.retrieval.settings import SearchSettings, SearchSettingsError
from lmplatform.tracking.registry import (
    SEARCH_SETTINGS_TAG,
    read_search_settings,
    register_model_version,
    register_search_settings,
)


def test_search_settings_are_a_validated_tag_of_the_version(tiny_bert: Path, tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.tracking.mlflow_tracking import get_or_create_experiment

    (tmp_path / "mlruns").mkdir(exist_ok=True)
    client = MlflowClient(mlflow_uri)
    run = client.create_run(get_or_create_experiment(mlflow_uri, "registry-test"))
    client.log_artifacts(run.info.run_id, str(tiny_bert), "model")
    version = register_model_version(mlflow_uri, "enc", f"{run.info.artifact_uri}/model", run.info.run_id)
    assert read_search_settings(mlflow_uri, "enc", version) is None

    saved = register_search_settings(mlflow_uri, "enc", version, {"mode": "hybrid", "bm25_weight": 0.25})
    assert saved == SearchSettings(mode="hybrid", bm25_weight=0.25) == read_search_settings(mlflow_uri, "enc", version)
    again = register_search_settings(mlflow_uri, "enc", int(version), SearchSettings(fusion="rrf", rrf_k=10))
    assert read_search_settings(mlflow_uri, "enc", version) == again  # replaced, not merged

    for bad, field in [({"bm25_weight": 1.5}, "bm25_weight"), ({"mode": "sparse"}, "mode"), ({"weight": 0.2}, "weight"),
                       ({"rerank_depth": 0}, "rerank_depth"), ({"bm25_weight": float("nan")}, "bm25_weight")]:
        with pytest.raises(SearchSettingsError, match=rf"invalid search settings: {field}: "):
            register_search_settings(mlflow_uri, "enc", version, bad)
    assert read_search_settings(mlflow_uri, "enc", version) == again  # a refused one is never written
    client.set_model_version_tag("enc", version, SEARCH_SETTINGS_TAG, "[0.2]")
    with pytest.raises(SearchSettingsError, match="tag lmp.search_settings must be a JSON object"):
        read_search_settings(mlflow_uri, "enc", version)
