"""Real Ray Train runs of the MLM objective with a tiny BERT, tracked in real MLflow (sqlite)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from lmplatform.jobs.train_run import run_training
from lmplatform.objectives.run_config import load_run_config


def _config(tiny_bert: Path, corpus: Path, mlflow_uri: str, storage: Path, *extra: str):
    return load_run_config(None, [
        f"model.name_or_path={tiny_bert}",
        "model.max_seq_length=32",
        f"data.train_paths={corpus}",
        "data.validation_fraction=0.2",
        "objective.pseudo_perplexity_sentences=2",
        "optim.batch_size=8",
        "optim.lr=1e-3",
        "scaling.cpus_per_worker=1",
        f"checkpoint.storage_path={storage}",
        f"tracking.tracking_uri={mlflow_uri}",
        "tracking.experiment=tests",
        "tracking.log_every_n_steps=2",
        *extra,
    ])


def _history(mlflow_uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(mlflow_uri).get_metric_history(run_id, key)]


def test_two_workers_train_log_and_register(ray_session, tiny_bert, corpus_file, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient
    from transformers import AutoModelForMaskedLM

    cfg = _config(tiny_bert, corpus_file, mlflow_uri, tmp_path / "runs", "scaling.num_workers=2", "optim.max_steps=8",
                  "checkpoint.every_n_steps=4", "tracking.registered_model=tiny-mlm")
    result = run_training(cfg)

    assert result.metrics["step"] == 8
    assert result.metrics["val_mlm_loss"] < result.metrics["val_mlm_loss_initial"]
    client = MlflowClient(mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["scaling.num_workers"] == "2" and run.data.params["optim.max_steps"] == "8"
    assert run.data.tags["lmp.objective"] == "mlm" and len(run.data.tags["lmp.data_fingerprint"]) == 16
    assert run.data.tags["lmp.git_commit"]
    assert [s for s, _ in _history(mlflow_uri, result.mlflow_run_id, "loss")] == [2, 4, 6, 8]
    assert all(v > 0 for _, v in _history(mlflow_uri, result.mlflow_run_id, "tokens_per_s"))
    assert "data/bad_rows" in run.data.metrics
    # the final model is a Hugging Face folder, logged as an artifact and registered from it
    artifacts = {a.path for a in client.list_artifacts(result.mlflow_run_id, "model")}
    assert "model/config.json" in artifacts and "model/tokenizer.json" in artifacts
    version = client.get_model_version("tiny-mlm", result.model_version)
    assert version.run_id == result.mlflow_run_id and version.source.endswith("/model")
    AutoModelForMaskedLM.from_pretrained(str(result.model_dir))
    # a later stage can start from the registered model
    from lmplatform.models.resolve import resolve_model_path

    os.environ["MLFLOW_TRACKING_URI"] = mlflow_uri
    try:
        assert (resolve_model_path(f"models:/tiny-mlm/{result.model_version}") / "config.json").is_file()
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]


def test_resume_of_unknown_run_is_a_clear_error(tiny_bert, corpus_file, mlflow_uri, tmp_path) -> None:
    (tmp_path / "runs").mkdir()
    cfg = _config(tiny_bert, corpus_file, mlflow_uri, tmp_path / "runs", "optim.max_steps=2")
    with pytest.raises(FileNotFoundError, match="--resume nope: no run of that name"):
        run_training(cfg, resume="nope")
