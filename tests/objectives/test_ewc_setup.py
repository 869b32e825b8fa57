"""The `ewc:` block wiring: a Fisher file computed from a corpus, and the penalty attached to any recipe."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmplatform.objectives.ewc import EWCPenalty, FisherDiagonal
from lmplatform.objectives.ewc_setup import attach_ewc, compute_fisher_file
from lmplatform.objectives.mlm.objective import build_recipe as build_mlm_recipe
from lmplatform.objectives.run_config import load_run_config


def test_fisher_file_from_a_corpus_then_penalty_on_the_recipe(tiny_bert: Path, corpus_file: Path, tmp_path: Path) -> None:
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", f"data.train_paths={corpus_file}"])
    out = tmp_path / "fisher.safetensors"
    meta = compute_fisher_file(str(tiny_bert), cfg.data, str(out), samples=6, batch_size=2, max_seq_length=32)
    assert meta["gradients"] == 3 and meta["examples"] == 6 and meta["source_model"] == str(tiny_bert)
    assert FisherDiagonal.load(out).metadata["data"] == [str(corpus_file)]

    with_ewc = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32",
                                      f"data.train_paths={corpus_file}", f"ewc.fisher_path={out}", "ewc.lambda=100"])
    recipe = build_mlm_recipe(with_ewc)
    report = attach_ewc(with_ewc, recipe)
    (penalty,) = recipe.regularizers
    assert isinstance(penalty, EWCPenalty) and report.matched_tensors == report.model_tensors
    assert float(penalty(recipe.model)[0].detach()) == 0.0  # θ* defaults to the starting model
    with torch.no_grad():
        next(recipe.model.parameters()).add_(1.0)
    assert float(penalty(recipe.model)[0].detach()) > 0.0
    assert attach_ewc(cfg, build_mlm_recipe(cfg)) is None  # no ewc block, no regularizer


def _headless_bert(folder: Path) -> Path:
    """The tiny BERT's backbone saved alone, as a sentence encoder ships (no MLM head)."""
    from transformers import AutoModel, AutoTokenizer

    from tests.conftest import write_tiny_bert

    full = write_tiny_bert(folder / "full")
    AutoModel.from_pretrained(str(full)).save_pretrained(str(folder / "headless"))
    AutoTokenizer.from_pretrained(str(full)).save_pretrained(str(folder / "headless"))
    return folder / "headless"


def test_a_fisher_through_an_untrained_mlm_head_is_refused_before_anything_starts(
    tiny_bert: Path, corpus_file: Path, mlflow_uri: str, mlflow_template: Path, tmp_path: Path
) -> None:
    import ray

    from lmplatform.config.loader import ConfigError
    from lmplatform.jobs.train_run import run_training
    from lmplatform.objectives.ewc_setup import check_fisher_anchor

    headless = _headless_bert(tmp_path)
    base = [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", f"data.train_paths={corpus_file}",
            f"ewc.fisher_from.train_paths=[{corpus_file}]", "ewc.lambda=100", f"tracking.tracking_uri={mlflow_uri}",
            f"checkpoint.storage_path={tmp_path / 'runs'}"]
    check_fisher_anchor(load_run_config(None, base))  # the tiny BERT was saved with its MLM head
    with pytest.raises(ConfigError,
                       match=r"ewc.anchor_model = '.*headless' has no trained MLM head \(\d+ head tensors, e.g. cls\."):
        run_training(load_run_config(None, base + [f"ewc.anchor_model={headless}"]))
    # without anchor_model the starting model is the anchor, and the message says so
    with pytest.raises(ConfigError,
                       match=r"ewc.anchor_model \(unset, so model.name_or_path\) = 'default' has no trained MLM head"):
        run_training(load_run_config(None, base + ["model.name_or_path=default"]))
    assert not ray.is_initialized()  # refused before Ray, the Fisher task or any worker
    assert not (tmp_path / "runs").exists()
    assert (tmp_path / "mlruns" / "mlflow.db").read_bytes() == mlflow_template.read_bytes()  # and before MLflow
    with pytest.raises(ValueError, match="has no trained MLM head"):  # library use refuses it too
        compute_fisher_file(str(headless), load_run_config(None, base).data, str(tmp_path / "f.safetensors"), samples=2)
    # a Fisher given as a file was computed elsewhere: not this check's business
    check_fisher_anchor(load_run_config(None, base[:3] + ["ewc.fisher_path=fisher.safetensors", "ewc.lambda=100",
                                                          f"ewc.anchor_model={headless}"]))


def test_the_shipped_ewc_config_anchors_on_a_registered_mlm_model(
    tiny_bert: Path, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/biencoder_ewc.yaml passes the check once an MLM model is the champion of lmplatform-mlm."""
    from mlflow.tracking import MlflowClient

    from lmplatform.config.loader import ConfigError
    from lmplatform.objectives.ewc_setup import check_fisher_anchor
    from lmplatform.tracking.mlflow_tracking import TrackedRun
    from lmplatform.tracking.registry import register_model_version

    shipped = Path(__file__).resolve().parents[2] / "configs" / "biencoder_ewc.yaml"
    cfg = load_run_config(shipped)
    assert cfg.ewc.anchor_model == "models:/lmplatform-mlm@champion" and cfg.ewc.fisher_from is not None
    with pytest.raises(ConfigError, match="'default' has no trained MLM head"):  # what the config shipped before
        check_fisher_anchor(load_run_config(shipped, ["ewc.anchor_model=null", "model.name_or_path=default"]))

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    run = TrackedRun.start(mlflow_uri, "tests", "mlm")
    version = register_model_version(mlflow_uri, "lmplatform-mlm", run.log_artifacts(tiny_bert, "model"), run.run_id)
    MlflowClient(mlflow_uri).set_registered_model_alias("lmplatform-mlm", "champion", version)
    check_fisher_anchor(cfg)
