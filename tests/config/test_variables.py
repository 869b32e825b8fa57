"""Config variables and `extends`: one recipe, many data sets; what is missing is named before anything runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError, read_yaml
from lmplatform.config.variables import extend, substitute
from lmplatform.pipeline.config import load_pipeline_config
from lmplatform.tune.kinds.pipeline import trial_pipeline
from lmplatform.tune.space import load_space

REPO = Path(__file__).resolve().parents[2]


def test_a_whole_reference_keeps_its_type_and_a_partial_one_becomes_text() -> None:
    data = {"vars": {"root": "runs/x", "k": 5}, "a": "${root}/reports.jsonl", "b": "${k}", "c": ["${k}-${root}"]}
    assert substitute(data, "cfg") == {"a": "runs/x/reports.jsonl", "b": 5, "c": ["5-runs/x"]}


def test_unknown_and_unset_variables_are_refused_naming_where_they_are_used() -> None:
    with pytest.raises(ConfigError, match=r"stages\[0\].corpus uses \$\{roots\}, which no variable defines \(variables: root"):
        substitute({"vars": {"root": "x"}, "stages": [{"corpus": "${roots}/a"}]}, "cfg")
    with pytest.raises(ConfigError, match=r"a needs the variable 'root', which is not set: --set vars.root=VALUE"):
        substitute({"vars": {"root": None}, "a": "${root}"}, "cfg")
    with pytest.raises(ConfigError, match="vars.root must be a string, a number or a boolean"):
        substitute({"vars": {"root": ["x"]}, "a": "b"}, "cfg")
    assert substitute({"vars": {"unused": None}, "a": "b"}, "cfg") == {"a": "b"}  # only a used variable is required


def test_an_instance_replaces_top_level_keys_and_merges_vars(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_text("name: recipe\nvars: {root: null, file: r.jsonl}\nstages: [a, b]\n")
    (tmp_path / "instance.yaml").write_text("extends: recipe.yaml\nname: mine\nvars: {root: data/mine}\n")
    merged = extend(read_yaml(tmp_path / "instance.yaml"), tmp_path / "instance.yaml", read_yaml)
    assert merged == {"name": "mine", "vars": {"root": "data/mine", "file": "r.jsonl"}, "stages": ["a", "b"]}
    (tmp_path / "loop.yaml").write_text("extends: loop.yaml\n")
    with pytest.raises(ConfigError, match="leads back to itself"):
        extend(read_yaml(tmp_path / "loop.yaml"), tmp_path / "loop.yaml", read_yaml)


def test_the_openoffice_pipeline_and_study_are_the_tracker_recipe_on_openoffice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    root = "../shared/data/duplicate_bug_reports/openoffice"
    instance = load_pipeline_config("configs/pipelines/openoffice_system.yaml")
    recipe = load_pipeline_config("configs/pipelines/tracker_system.yaml", [
        f"vars.data_root={root}", "vars.reports=corpus.jsonl", "vars.registered_model=openoffice-system"])
    assert instance.stages == recipe.stages and instance.stages[0].pairs.corpus == f"{root}/corpus.jsonl"
    with pytest.raises(ConfigError, match="needs the variable 'data_root'"):
        load_pipeline_config("configs/pipelines/tracker_system.yaml")
    # The study's variables reach its pipeline: one data root for both.
    space = load_space("tune_spaces/tracker_system.yaml", ["vars.data_root=runs/data/mine"])
    assert trial_pipeline(space, {}).stages[0].pairs.relations == "runs/data/mine/pairs.jsonl"
    assert space.space.champion.confirm.distractors.paths == ["runs/data/mine/reports.jsonl"]
    study = load_space("tune_spaces/openoffice_system.yaml")
    assert trial_pipeline(study, {}).stages == load_pipeline_config(
        "configs/pipelines/openoffice_system.yaml", study.space.overrides).stages
