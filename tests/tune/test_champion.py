"""The champion rule on a real MLflow registry (sqlite): only a better model on the same validation data wins."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.tune.champion import evaluation_fingerprint, register_and_maybe_promote


def _run_with_model(uri: str, folder: Path, files: tuple[str, ...] = ("config.json", "model.safetensors")) -> str:
    from lmplatform.tracking.mlflow_tracking import TrackedRun

    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        (folder / name).write_text("{}")
    run = TrackedRun.start(uri, "champion-tests", folder.name)
    run.log_artifacts(folder, "model")
    run.finish()
    return run.run_id


def test_the_alias_moves_only_for_a_better_model_measured_the_same_way(tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)

    def promote(name: str, value: float, fingerprint: str = "fp-a",
                files: tuple[str, ...] = ("config.json", "model.safetensors")):
        run_id = _run_with_model(mlflow_uri, tmp_path / name, files)
        return register_and_maybe_promote(mlflow_uri, "enc", run_id, "model", "val_mlm_loss", "min", value,
                                          fingerprint, {"val_mlm_loss": value})

    first = promote("first", 3.0)
    assert first.moved and "no champion yet" in first.reason
    worse = promote("worse", 3.5)
    assert not worse.moved and "does not beat" in worse.reason and worse.previous_version == first.version
    other_data = promote("other-data", 1.0, fingerprint="fp-b")
    assert not other_data.moved and "other validation data" in other_data.reason
    assert str(client.get_model_version_by_alias("enc", "champion").version) == first.version
    # a half-written model folder is never registered, let alone promoted
    with pytest.raises(RuntimeError, match="not a complete model folder"):
        promote("half-written", 0.5, files=("config.json",))
    assert str(client.get_model_version_by_alias("enc", "champion").version) == first.version
    better = promote("better", 2.5)
    assert better.moved and better.previous_version == first.version
    champion = client.get_model_version_by_alias("enc", "champion")
    assert str(champion.version) == better.version and champion.tags["lmp.metric_value"] == "2.5"
    assert champion.tags["metric.val_mlm_loss"] == "2.5"

    from lmplatform.cli.models import model_versions

    rows = model_versions(mlflow_uri, "enc")
    assert [r["version"] for r in rows] == ["4", "3", "2", "1"]
    assert [r["aliases"] for r in rows] == [["champion"], [], [], []]
    from typer.testing import CliRunner

    from lmplatform.cli import app

    out = CliRunner().invoke(app, ["models", "list", "--name", "enc", "--tracking-uri", mlflow_uri])
    assert out.exit_code == 0, out.output
    champion_line = next(line for line in out.output.splitlines() if "champion" in line and "enc" in line)
    assert " 4 " in champion_line and "2.5" in champion_line and "val_mlm_loss" in champion_line


def test_the_fingerprint_tracks_validation_settings_not_training_ones(tmp_path: Path, corpus_file: Path) -> None:
    from lmplatform.objectives.run_config import load_run_config

    base = [f"data.train_paths={corpus_file}"]
    reference = evaluation_fingerprint(load_run_config(None, base), "data1", "val_mlm_loss")
    assert evaluation_fingerprint(load_run_config(None, [*base, "optim.lr=1e-3"]), "data1", "val_mlm_loss") == reference
    for changed in ("data.validation_fraction=0.3", "data.seed=1", "objective.mask_probability=0.3", "model.max_seq_length=64"):
        assert evaluation_fingerprint(load_run_config(None, [*base, changed]), "data1", "val_mlm_loss") != reference, changed
    assert evaluation_fingerprint(load_run_config(None, base), "data2", "val_mlm_loss") != reference


@pytest.mark.parametrize("objective, changes_meaning", [
    ("mlm", "objective.mask_probability=0.3"),
    ("declutr", "objective.max_span=16"),
    ("biencoder", "optim.batch_size=64"),  # in-batch numbers depend on the batch
    ("cross_encoder", "objective.negatives_per_positive=5"),
    ("sts", "objective.score_field=relatedness"),
    ("classifier", "objective.label_field=kind"),
    ("graph_cl", "objective.variant=cldr"),
])
def test_the_fingerprint_covers_each_objectives_evaluation_settings(objective: str, changes_meaning: str) -> None:
    from lmplatform.objectives.run_config import load_run_config

    base = ["data.train_paths=[x.jsonl]", f"objective.name={objective}"]
    metric = "val_loss"
    fingerprint = evaluation_fingerprint(load_run_config(None, base), "data-a", metric)
    assert evaluation_fingerprint(load_run_config(None, [*base, "optim.lr=0.001"]), "data-a", metric) == fingerprint
    assert evaluation_fingerprint(load_run_config(None, [*base, changes_meaning]), "data-a", metric) != fingerprint
    assert evaluation_fingerprint(load_run_config(None, base), "data-b", metric) != fingerprint


def test_a_corpus_level_fingerprint_follows_the_retrieval_set_not_the_batch() -> None:
    from lmplatform.objectives.run_config import load_run_config

    base = ["data.train_paths=[x.jsonl]", "objective.name=biencoder", "retrieval_validation.recall_ks=[1,10]"]
    metric = "val_ir_ndcg_at_10"
    fingerprint = evaluation_fingerprint(load_run_config(None, base), "data-a", metric, "set-a")
    assert evaluation_fingerprint(load_run_config(None, [*base, "optim.batch_size=64"]), "data-b", metric, "set-a") == fingerprint
    assert evaluation_fingerprint(load_run_config(None, [*base, "retrieval_validation.relevance=pair"]), "data-a", metric,
                                  "set-a") != fingerprint
    assert evaluation_fingerprint(load_run_config(None, base), "data-a", metric, "set-b") != fingerprint
