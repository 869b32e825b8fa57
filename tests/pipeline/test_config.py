"""Pipeline configs fail at load time, naming the stage and field (the shipped presets: tests/test_shipped_configs.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lmplatform.config.loader import ConfigError
from lmplatform.pipeline.config import build_stage_config, load_pipeline_config, pipeline_config_from_dict


def _write(tmp_path: Path, stages: list[dict], **extra: object) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "stages": stages, **extra}))
    return path


def _mlm(**extra: object) -> dict:
    return {"data": {"train_paths": ["a.jsonl"]}, "optim": {"max_steps": 2}, **extra}


def test_stage_config_chains_models_tracking_storage_and_ewc(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_mlm()))
    path = _write(tmp_path, [
        {"name": "domain", "config": "base.yaml"},
        {"name": "task", "run": _mlm(), "init_from": "stage:domain", "set": ["optim.lr=1e-4"],
         "ewc": {"anchor": "domain", "data": {"train_paths": ["a.jsonl"]}, "lambda": 1e6, "samples": 50}},
    ], tracking={"tracking_uri": "sqlite:///x.db", "experiment": "e"})
    cfg = load_pipeline_config(path, ["stages.task.optim.max_steps=7", "stages.task.ewc.lambda=1e7"])
    run = build_stage_config(cfg, cfg.stage("task"), "/models/domain", "/store", "p-1.task", ewc_anchor_model="/models/domain")
    assert run.model.name_or_path == "/models/domain" and run.checkpoint.storage_path == "/store"
    assert run.tracking.tracking_uri == "sqlite:///x.db" and run.tracking.experiment == "e"
    assert run.tracking.run_name == "p-1.task" and run.tracking.registered_model == "p-task"
    assert run.optim.lr == 1e-4 and run.optim.max_steps == 7
    assert run.ewc.lambda_ == 1e7 and run.ewc.samples == 50 and run.ewc.anchor_model == "/models/domain"
    assert run.ewc.fisher_from.train_paths == ["a.jsonl"]
    assert build_stage_config(cfg, cfg.stage("domain"), "default", "/s", "r").ewc is None


@pytest.mark.parametrize("stages, message", [
    ([{"name": "a", "run": _mlm(), "init_from": "stage:b"}, {"name": "b", "run": _mlm()}], "init_from names 'b', which is not an earlier stage"),
    ([{"name": "a", "run": _mlm(), "ewc": {"anchor": "a", "fisher_path": "f", "lambda": 1}}], "ewc.anchor names 'a'"),
    ([{"name": "a", "run": _mlm()}, {"name": "a", "run": _mlm()}], "stage name 'a' is used twice"),
    ([{"name": "a", "run": _mlm(optim={"lr": -1})}], "stage 'a'"),
    ([{"name": "a"}], "set exactly one of `config`"),
    ([{"name": "a", "run": _mlm(), "evaluations": [{"name": "bleu", "data": {"train_paths": ["x"]}}]}], "unknown evaluation 'bleu'"),
    ([{"name": "a", "run": _mlm(), "ewc": {"anchor": "a", "lambda": 1}}], "exactly one of ewc.data"),
    ([{"name": "a", "run": _mlm(), "ewc": {"fisher_path": "f", "lambda": 1}}], "exactly one of ewc.anchor"),
    ([{"name": "a", "run": _mlm()}, {"name": "b", "run": _mlm(), "ewc": {"anchor": "a", "anchor_model": "/m", "fisher_path": "f", "lambda": 1}}],
     "exactly one of ewc.anchor"),
])
def test_bad_pipelines_fail_before_any_stage_runs(tmp_path: Path, stages: list[dict], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_pipeline_config(_write(tmp_path, stages))


def test_pipeline_from_a_dict_resolves_stage_files_against_base_dir_and_leaves_the_dict_alone(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_mlm()))
    data = {"name": "p", "stages": [
        {"name": "task", "config": "base.yaml", "init_from": "/models/shared-domain",
         "ewc": {"anchor_model": "/models/shared-domain", "fisher_path": "/f.safetensors", "lambda": 1e4}},
    ]}
    cfg = pipeline_config_from_dict(data, tmp_path, ["name=q", "stages.task.optim.max_steps=3", "stages.task.ewc.lambda=1e5"])
    assert cfg.name == "q" and cfg.base_dir == str(tmp_path.resolve())
    assert "set" not in data["stages"][0] and data["stages"][0]["ewc"]["lambda"] == 1e4
    stage = cfg.stage("task")
    assert stage.ewc.anchor_reference == "/models/shared-domain" and stage.ewc.lambda_ == 1e5
    run = build_stage_config(cfg, stage, "/models/shared-domain", "/s", "r", ewc_anchor_model="/models/shared-domain")
    assert run.optim.max_steps == 3 and run.data.train_paths == ["a.jsonl"]
    assert run.ewc.anchor_model == "/models/shared-domain" and run.ewc.fisher_path == "/f.safetensors"
    with pytest.raises(ConfigError, match="base.yaml"):  # resolved against base_dir, not the working directory
        pipeline_config_from_dict(data, tmp_path / "elsewhere")


def test_unknown_stage_in_override_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no stage named 'nope'"):
        load_pipeline_config(_write(tmp_path, [{"name": "a", "run": _mlm()}]), ["stages.nope.optim.lr=1"])


def _mine(**extra: object) -> dict:
    return {"name": "mined", "mine": {"pairs": {"train_paths": ["pairs.jsonl"]}, **extra}}


def _pairs_run(*paths: str) -> dict:
    return {"data": {"train_paths": list(paths)}, "objective": {"name": "biencoder"}, "optim": {"max_steps": 2}}


def test_a_mine_stage_s_pairs_file_feeds_a_later_stage(tmp_path: Path) -> None:
    cfg = load_pipeline_config(_write(tmp_path, [_mine(), {"name": "train", "run": _pairs_run("stage:mined", "extra.jsonl")}]))
    assert cfg.stage("mined").mine.num_negatives == 3 and cfg.stage("mined").mine.relative_margin == 0.05
    run = build_stage_config(cfg, cfg.stage("train"), "default", "/s", "r", stage_outputs={"mined": "/p/mined/pairs.jsonl"})
    assert run.data.train_paths == ["/p/mined/pairs.jsonl", "extra.jsonl"]


@pytest.mark.parametrize(("stages", "message"), [
    ([{"name": "train", "run": _pairs_run("stage:mined")}, _mine()], r"data paths name stage:mined, which is not an earlier mine stage"),
    ([{"name": "a", "run": _mlm()}, {"name": "b", "run": _pairs_run("stage:a")}], r"not an earlier mine stage \(earlier mine stages: none\)"),
    ([_mine(), {"name": "train", "run": _pairs_run("p.jsonl"), "init_from": "stage:mined"}], r"init_from names mine stage 'mined'"),
    ([{**_mine(), "set": ["optim.lr=1"]}], r"a mine stage trains nothing"),
    ([{**_mine(), "run": _mlm()}], r"exactly one of `config` \(a file\), `run` \(inline\) or `mine`"),
    ([_mine(range_min=5, range_max=5)], r"mine.range_min \(5\) must be below mine.range_max \(5\)"),
    ([_mine(num_negatives=9, range_max=4)], r"mine.num_negatives \(9\) must be at most range_max - range_min \(4\)"),
    ([_mine(relative_margin=1.5)], r"relative_margin"),
    ([_mine(precision="fp16\x00")], r"precision.*'fp32', 'bf16' or 'auto'"),
])
def test_bad_mine_stages_fail_at_load_time(tmp_path: Path, stages: list[dict], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_pipeline_config(_write(tmp_path, stages))
