"""Exports logged beside model/ in a real MLflow (sqlite in tmp), by the library and by `lmp export --log`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lmplatform.models.encoder import Encoder
from lmplatform.tracking.exports import EXPORTS_TAG, export_and_log, source_run


def _registered(mlflow_uri: str, model_dir: Path, name: str = "exported") -> tuple[str, str]:
    from mlflow.tracking import MlflowClient

    from lmplatform.tracking.mlflow_tracking import get_or_create_experiment
    from lmplatform.tracking.registry import register_model_version

    client = MlflowClient(mlflow_uri)
    run = client.create_run(get_or_create_experiment(mlflow_uri, "exports"))
    client.log_artifacts(run.info.run_id, str(model_dir), "model")
    version = register_model_version(mlflow_uri, name, f"{run.info.artifact_uri}/model", run.info.run_id)
    client.set_registered_model_alias(name, "champion", version)
    return run.info.run_id, version


def test_exports_are_logged_beside_the_model_folder(tiny_bert: Path, mlflow_uri: str, tmp_path: Path) -> None:
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    run_id, _ = _registered(mlflow_uri, tiny_bert)
    logged = export_and_log(mlflow_uri, run_id, tiny_bert, ["sentence-transformers", "onnx"])
    assert set(logged) == {"sentence-transformers", "onnx"}
    client = MlflowClient(mlflow_uri)
    assert {a.path for a in client.list_artifacts(run_id)} == {"model", "model-sentence-transformers", "model-onnx",
                                                               "model_cards"}  # the registered version's card
    assert client.get_run(run_id).data.tags[EXPORTS_TAG] == "onnx,sentence-transformers"

    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=logged["onnx"], dst_path=str(tmp_path / "dl"),
                                                     tracking_uri=mlflow_uri))
    texts = ["vpn tunnel down", "disk quota exceeded on the backup volume"]
    reference = Encoder.from_pretrained(tiny_bert).encode(texts)
    assert np.abs(Encoder.from_pretrained(local, backend="onnx").encode(texts) - reference).max() < 1e-5


def test_lmp_export_log_writes_into_the_versions_run(tiny_bert: Path, mlflow_uri: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.cli import app

    run_id, version = _registered(mlflow_uri, tiny_bert)
    assert source_run("models:/exported@champion", mlflow_uri) == run_id
    assert source_run(f"models:/exported/{version}", mlflow_uri) == run_id and source_run(str(tiny_bert)) is None
    result = CliRunner().invoke(app, ["export", "--model", "models:/exported@champion", "--format", "sentence-transformers",
                                      "--out", str(tmp_path / "st"), "--log", "--tracking-uri", mlflow_uri])
    assert result.exit_code == 0, result.output
    assert f"logged to MLflow run {run_id}" in result.output
    names = {a.path for a in MlflowClient(mlflow_uri).list_artifacts(run_id, "model-sentence-transformers")}
    assert "model-sentence-transformers/modules.json" in names


def test_a_cross_encoder_run_cannot_ask_for_an_onnx_export() -> None:
    from pydantic import ValidationError

    from lmplatform.objectives.run_config import RunConfig

    base = {"data": {"train_paths": ["x.jsonl"]}, "objective": {"name": "cross_encoder"}}
    assert RunConfig.model_validate({**base, "tracking": {"exports": ["sentence-transformers"]}})
    with pytest.raises(ValidationError, match="onnx exports encoders; this is a cross-encoder: export it as sentence-"):
        RunConfig.model_validate({**base, "tracking": {"exports": ["onnx"]}})
