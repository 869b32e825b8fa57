"""Pre-flight: every missing file and model of every stage is listed before stage 1, and nothing starts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lmplatform.pipeline.config import pipeline_config_from_dict
from lmplatform.pipeline.preflight import PreflightError, pipeline_problems, preflight_pipeline

ROOT = Path(__file__).resolve().parents[2]


def _run(path: str, objective: str = "mlm") -> dict:
    return {"data": {"train_paths": [path]}, "objective": {"name": objective}, "optim": {"max_steps": 2}}


def _evaluation(path: str, **extra: object) -> dict:
    return {"name": "old_domain_mlm_loss", "label": "old", "data": {"train_paths": [path]}, **extra}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Relative paths are read from the working directory: run in a folder holding one good corpus."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"text": "printer jam on floor two"}) + "\n")
    return tmp_path


def _broken_pipeline(base: Path) -> dict:
    (base / "empty.jsonl").write_text("")
    (base / "empty_folder").mkdir()
    return {"name": "p", "stages": [
        {"name": "domain", "run": _run("corpus.jsonl"), "evaluations": [_evaluation("old_missing.jsonl")]},
        {"name": "general", "run": _run("general_missing.jsonl", "biencoder"), "init_from": "stage:domain",
         "set": ["data.validation_paths=[validation_missing.jsonl]"],  # checked after the stage's overrides
         "ewc": {"anchor": "domain", "data": {"train_paths": ["fisher_missing.jsonl"]}, "lambda": 1.0}},
        {"name": "task", "run": _run("empty.jsonl", "biencoder"), "init_from": "no/such/model",
         "ewc": {"anchor_model": "default", "fisher_path": "fisher_missing.safetensors", "lambda": 1.0},
         "evaluations": [_evaluation("empty_folder", mlm_head_from="stage:domain")]},
    ], "tasks": [{**_evaluation("corpus.jsonl"), "task": "domain", "mlm_head_from": "stage:domain"},
                 {"name": "retrieval", "task": "pairs", "data": {"train_paths": ["corpus.jsonl"]},
                  "retrieval": {"distractors": {"paths": ["distractors_missing.jsonl"], "fields": ["text"]}}}]}


def test_every_problem_of_every_stage_is_listed_with_its_stage_and_field(workdir: Path) -> None:
    cfg = pipeline_config_from_dict(_broken_pipeline(workdir), workdir)
    problems = pipeline_problems(cfg)
    assert sorted((p.where, p.field) for p in problems) == sorted([
        ("stage 'domain'", "evaluations.old.data.train_paths"),
        ("stage 'general'", "data.train_paths"),
        ("stage 'general'", "data.validation_paths"),
        ("stage 'general'", "ewc.data.train_paths"),
        ("stage 'task'", "data.train_paths"),
        ("stage 'task'", "init_from"),
        ("stage 'task'", "ewc.fisher_path"),
        ("stage 'task'", "evaluations.old.data.train_paths"),
        ("task 'domain'", "tasks.mlm_head_from"),
        ("task 'pairs'", "tasks.retrieval.distractors.paths"),
    ])
    with pytest.raises(PreflightError) as info:
        preflight_pipeline(cfg)
    message = str(info.value)
    assert message.startswith("pipeline 'p' cannot start: 10 problem(s) found before stage 1; nothing was trained")
    for line in (
        f"stage 'general': data.train_paths: data file not found: general_missing.jsonl (relative paths are read from {workdir})",
        "stage 'general': data.validation_paths: data file not found: validation_missing.jsonl",
        "stage 'task': data.train_paths: data file is empty: empty.jsonl",
        "stage 'task': evaluations.old.data.train_paths: data folder is empty: empty_folder",
        "stage 'task': init_from: model 'no/such/model' is not a local folder",
        "stage 'task': ewc.fisher_path: file not found: fisher_missing.safetensors",
        "task 'domain': tasks.mlm_head_from: stage:domain: tasks are first scored on the starting model",
    ):
        assert line in message, line
    assert "corpus.jsonl" not in message  # the files that are there are not reported


def test_a_resumed_pipeline_checks_the_stages_still_to_run_and_the_models_finished_ones_left(workdir: Path) -> None:
    spec = {"name": "p", "stages": [
        {"name": "domain", "run": _run("gone_after_stage_1.jsonl")},
        {"name": "task", "run": _run("corpus.jsonl"), "init_from": "stage:domain"},
    ]}
    cfg = pipeline_config_from_dict(spec, workdir)
    assert [p.field for p in pipeline_problems(cfg)] == ["data.train_paths"]
    model = workdir / "domain-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert pipeline_problems(cfg, finished={"domain": str(model)}) == []  # the finished stage's data is not needed again
    (model / "config.json").unlink()
    (problem,) = pipeline_problems(cfg, finished={"domain": str(model)})
    assert (problem.where, problem.field) == ("stage 'task'", "init_from")
    assert f"stage:domain finished earlier, but its model folder {model} is gone" in problem.message


def test_registry_references_are_looked_up_in_the_tracking_store(workdir: Path, mlflow_uri: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.tracking.mlflow_tracking import get_or_create_experiment
    from lmplatform.tracking.registry import register_model_version

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)  # where a stage's run resolves models:/ references
    client = MlflowClient(mlflow_uri)
    run = client.create_run(get_or_create_experiment(mlflow_uri, "e"))
    version = register_model_version(mlflow_uri, "domain-encoder", f"{run.info.artifact_uri}/model", run.info.run_id)
    client.set_registered_model_alias("domain-encoder", "champion", version)
    spec = {"name": "p", "stages": [
        {"name": "a", "run": _run("corpus.jsonl"), "init_from": "models:/domain-encoder@champion"},
        {"name": "b", "run": _run("corpus.jsonl"), "init_from": "models:/domain-encoder@retired"},
        {"name": "c", "run": _run("corpus.jsonl"), "init_from": f"models:/domain-encoder/{version}"},
        {"name": "d", "run": _run("corpus.jsonl"), "init_from": "models:/other-encoder/1",
         "ewc": {"anchor_model": "default", "fisher_path": f"runs:/{run.info.run_id}/ewc/fisher.safetensors", "lambda": 1.0}},
        {"name": "e", "run": _run("corpus.jsonl"),
         "ewc": {"anchor_model": "default", "fisher_path": "runs:/0123456789abcdef/ewc/fisher.safetensors", "lambda": 1.0}},
    ]}
    problems = pipeline_problems(pipeline_config_from_dict(spec, workdir))
    assert [(p.where, p.field) for p in problems] == [
        ("stage 'b'", "init_from"), ("stage 'd'", "init_from"), ("stage 'e'", "ewc.fisher_path")]
    assert all(f"cannot be found in MLflow at {mlflow_uri}" in p.message for p in problems)


def test_lmp_pipeline_run_of_a_preset_stops_before_stage_1_and_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from lmplatform.cli import app

    monkeypatch.chdir(ROOT)  # the presets' data paths are relative to the repository root
    home = tmp_path / "home"
    monkeypatch.setenv("LMP_HOME", str(home))
    out = CliRunner().invoke(app, [
        "pipeline", "run", "--config", str(ROOT / "configs/pipelines/ms_ewc.yaml"),
        "--set", f"storage_path={home / 'runs'}", "--set", f"tracking.tracking_uri=sqlite:///{home / 'mlflow.db'}",
        "--set", "stages.general.data.train_paths=data/general/not_built.jsonl",
        "--set", "stages.task.init_from=missing/model/folder",
    ])
    assert out.exit_code == 2, out.output
    text = " ".join(out.output.split())  # the console may wrap long lines
    assert "pipeline 'ms_ewc' cannot start: 2 problem(s) found before stage 1; nothing was trained" in text
    assert "stage 'general': data.train_paths: data file not found: data/general/not_built.jsonl" in text
    assert "stage 'task': init_from: model 'missing/model/folder' is not a local folder" in text
    assert not home.exists()  # no state file, no MLflow parent run, no Ray


def test_a_stage_config_file_is_checked_after_the_stage_set_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline file's stage config (`config:`) is checked after its own `set:` overrides, like the run."""
    from lmplatform.pipeline.config import load_pipeline_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"text": "disk full"}) + "\n")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_run("corpus.jsonl")))
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "stages": [
        {"name": "a", "config": "base.yaml"},
        {"name": "b", "config": "base.yaml", "init_from": "stage:a", "set": ["data.train_paths=[elsewhere.jsonl]"]},
    ]}))
    assert [(p.where, p.field, p.path) for p in pipeline_problems(load_pipeline_config(path))] == [
        ("stage 'b'", "data.train_paths", "elsewhere.jsonl")]
