"""MODEL_CARD.md of registered versions, on a real MLflow (sqlite in tmp), from a run logged as training logs it."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lmplatform.tracking.model_card import CARD_TAG, read_model_card


def _training_run(mlflow_uri: str, tiny_bert: Path, corpus: Path) -> str:
    """A finished MLM run with what `run_training` logs: tags, the flattened config, data counts,
    validation before and after, and the model folder."""
    from lmplatform.objectives.run_config import RunConfig
    from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten

    cfg = RunConfig.model_validate({"model": {"name_or_path": str(tiny_bert), "max_seq_length": 64},
                                    "data": {"train_paths": [str(corpus)], "validation_fraction": 0.2},
                                    "objective": {"name": "mlm"}, "optim": {"lr": 3e-4, "max_steps": 8}})
    run = TrackedRun.start(mlflow_uri, "cards", "mlm-card-test", {
        "lmp.train_run": "mlm-card-test", "lmp.objective": "mlm", "lmp.git_commit": "abc123",
        "lmp.data_fingerprint": "4d56556abce900f6", "lmp.model_source": str(tiny_bert)})
    run.log_params(flatten(cfg.model_dump(mode="json")) | {"total_steps": 8})
    run.log_metrics({"data/rows_read": 120, "data/train_documents": 96, "data/validation_documents": 24,
                     "data/bad_rows": 0}, step=0)
    run.log_metrics({"val_mlm_loss_initial": 10.3566, "val_mlm_loss": 9.6343, "val_mlm_accuracy_initial": 0.0,
                     "val_mlm_accuracy": 0.0556, "loss": 9.87}, step=8)
    run.log_artifacts(tiny_bert, "model")
    run.finish()
    return run.run_id


def test_a_registered_version_carries_a_card_from_its_run_and_the_gate_decision_once_made(
        tiny_bert: Path, corpus_file: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.tracking.registry import register_model_version
    from lmplatform.tune.champion import register_and_maybe_promote

    run_id = _training_run(mlflow_uri, tiny_bert, corpus_file)
    client = MlflowClient(mlflow_uri)
    source = f"{client.get_run(run_id).info.artifact_uri}/model"
    version = register_model_version(mlflow_uri, "card-mlm", source, run_id, tags={"objective": "mlm"})
    card = read_model_card(mlflow_uri, "card-mlm", version)
    assert client.get_model_version("card-mlm", version).tags[CARD_TAG].endswith(f"model_cards/card-mlm/{version}/MODEL_CARD.md")
    for expected in (f"# card-mlm, version {version}", f"- Base model: {tiny_bert}",
                     "Objective: `mlm`: Masked-language-model continued pretraining.",  # the objective's own loss line
                     "32-d, 2 layers, BertForMaskedLM",  # from the saved config.json
                     "max sequence length 64 tokens", "`4d56556abce900f6`", "| train_documents | 96 |",
                     "| validation_documents | 24 |", "| `optim.lr` | 0.0003 |", "| `total_steps` | 8 |",
                     "| `val_mlm_loss` | 10.3566 | 9.6343 |", "No champion gate decision recorded",
                     "A domain-adapted encoder", "Texts longer than 64 tokens are cut", "| git commit | abc123 |"):
        assert expected in card, (expected, card)
    assert "| `loss` |" not in card and "data.train_paths" not in card.split("## Hyper-parameters")[1]

    # The study's registration of the same run: a second version of another model, with the gate's decision.
    decision = register_and_maybe_promote(mlflow_uri, "card-study", run_id, "model", "val_mlm_loss", "min", 9.6343,
                                          "fp", {"val_mlm_loss": 9.6343}, tags={"lmp.tune_study": "s-1", "lmp.tune_trial": "t-1"})
    assert decision.moved
    study_card = read_model_card(mlflow_uri, "card-study", decision.version)
    assert "**promoted**: no champion yet; version 1 becomes champion" in study_card
    assert "holds `@champion`" in study_card and "Selected in study `s-1` (trial `t-1`) on `val_mlm_loss` = 9.6343" in study_card
    assert read_model_card(mlflow_uri, "card-mlm", version) == card  # one run, two versions, two cards
    assert {a.path for a in client.list_artifacts(run_id, "model_cards")} == {"model_cards/card-mlm", "model_cards/card-study"}


def test_lmp_models_card_prints_it_and_names_a_missing_one(tiny_bert: Path, corpus_file: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.cli import app
    from lmplatform.tracking.registry import register_model_version

    run_id = _training_run(mlflow_uri, tiny_bert, corpus_file)
    register_model_version(mlflow_uri, "card-cli", f"{MlflowClient(mlflow_uri).get_run(run_id).info.artifact_uri}/model", run_id)
    runner = CliRunner()
    shown = runner.invoke(app, ["models", "card", "card-cli", "--tracking-uri", mlflow_uri])
    assert shown.exit_code == 0 and shown.output.startswith("# card-cli, version 1"), shown.output
    refreshed = runner.invoke(app, ["models", "card", "card-cli", "--refresh", "--tracking-uri", mlflow_uri])
    assert refreshed.exit_code == 0 and refreshed.output == shown.output
    missing = runner.invoke(app, ["models", "card", "card-cli", "--version", "7", "--tracking-uri", mlflow_uri])
    assert missing.exit_code == 2 and "no model card for card-cli version 7" in missing.output


@pytest.mark.parametrize("objective,use", [("cross_encoder", "Re-ranking"), ("biencoder", "Text embeddings for semantic search"),
                                           ("no_such_objective", "Text embeddings for semantic search")])
def test_intended_use_follows_the_objective(objective: str, use: str) -> None:
    from lmplatform.tracking.model_card import card_text

    assert card_text(objective).use.startswith(use)


def test_every_shipped_objective_describes_itself_in_one_line() -> None:
    from lmplatform.objectives.registry import objective_names
    from lmplatform.tracking.model_card import _objective_line

    assert all(_objective_line(name) for name in objective_names())
