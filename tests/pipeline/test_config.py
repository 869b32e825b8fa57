"""Pipeline configs fail at load time, naming the stage and field (the shipped presets: tests/test_shipped_configs.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
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
    ([{"name": "a", "run": _mlm(), "init_from": "stage:b"}, {"name": "b", "run": _mlm()}],
     "init_from names 'b', which is not an earlier stage"),
    ([{"name": "a", "run": _mlm(), "ewc": {"anchor": "a", "fisher_path": "f", "lambda": 1}}], "ewc.anchor names 'a'"),
    ([{"name": "a", "run": _mlm()}, {"name": "a", "run": _mlm()}], "stage name 'a' is used twice"),
    ([{"name": "a", "run": _mlm(optim={"lr": -1})}], "stage 'a'"),
    ([{"name": "a"}], "set exactly one of `config`"),
    ([{"name": "a", "run": _mlm(), "evaluations": [{"name": "bleu", "data": {"train_paths": ["x"]}}]}],
     "unknown evaluation 'bleu'"),
    ([{"name": "a", "run": _mlm(), "ewc": {"anchor": "a", "lambda": 1}}], "exactly one of ewc.data"),
    ([{"name": "a", "run": _mlm(), "ewc": {"fisher_path": "f", "lambda": 1}}], "exactly one of ewc.anchor"),
    ([{"name": "a", "run": _mlm()},
      {"name": "b", "run": _mlm(), "ewc": {"anchor": "a", "anchor_model": "/m", "fisher_path": "f", "lambda": 1}}],
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
    ([{"name": "train", "run": _pairs_run("stage:mined")}, _mine()],
     r"data paths name stage:mined, which is not an earlier mine stage"),
    ([{"name": "a", "run": _mlm()}, {"name": "b", "run": _pairs_run("stage:a")}],
     r"not an earlier mine stage \(earlier mine stages: none\)"),
    ([_mine(), {"name": "train", "run": _pairs_run("p.jsonl"), "init_from": "stage:mined"}],
     r"init_from names mine stage 'mined'"),
    ([{**_mine(), "set": ["optim.lr=1"]}], r"a mine stage trains nothing"),
    ([{**_mine(), "run": _mlm()}], r"exactly one of `config` \(a file\), `run` \(inline\), `mine`, `pairs` or `system`"),
    ([_mine(range_min=5, range_max=5)], r"mine.range_min \(5\) must be below mine.range_max \(5\)"),
    ([_mine(num_negatives=9, range_max=4)], r"mine.num_negatives \(9\) must be at most range_max - range_min \(4\)"),
    ([_mine(relative_margin=1.5)], r"relative_margin"),
    ([_mine(precision="fp16\x00")], r"precision.*'fp32', 'bf16' or 'auto'"),
])
def test_bad_mine_stages_fail_at_load_time(tmp_path: Path, stages: list[dict], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_pipeline_config(_write(tmp_path, stages))


def _pairs_stage(**extra: object) -> dict:
    return {"name": "data", "pairs": {"corpus": "corpus.jsonl", "relations": "pairs.jsonl", **extra}}


def test_a_pairs_stage_s_files_feed_later_stages_by_split(tmp_path: Path) -> None:
    holdout = {"split": "dev", "into": ["dev_select", "dev_confirm"]}
    cfg = load_pipeline_config(_write(tmp_path, [
        _pairs_stage(holdout=holdout),
        {"name": "mined", "mine": {"pairs": {"train_paths": ["stage:data/train"]}}},
        {"name": "train", "run": {**_pairs_run("stage:mined"), "data": {
            "train_paths": ["stage:mined"], "validation_paths": ["stage:data/dev_select"]}}},
    ]))
    assert cfg.stage("data").pairs.outputs() == ["train", "dev_select", "dev_confirm", "test"]
    assert cfg.stage("data").kind == "pairs" and cfg.stage("mined").kind == "mine" and cfg.stage("train").kind == "train"
    outputs = {"mined": "/p/mined/pairs.jsonl", "data/dev_select": "/p/data/dev_select.jsonl"}
    run = build_stage_config(cfg, cfg.stage("train"), "default", "/s", "r", stage_outputs=outputs)
    assert run.data.train_paths == ["/p/mined/pairs.jsonl"] and run.data.validation_paths == ["/p/data/dev_select.jsonl"]


@pytest.mark.parametrize(("stages", "message"), [
    ([_pairs_stage(), {"name": "t", "run": _pairs_run("stage:data/dev_select")}],
     r"stage 't': stage:data/dev_select: pairs stage 'data' writes train, dev, test, not 'dev_select'"),
    ([{"name": "t", "run": _pairs_run("stage:data/train")}, _pairs_stage()],
     r"stage:data/train names 'data', which is not an earlier pairs stage \(earlier pairs stages: none\)"),
    ([_pairs_stage(), {"name": "t", "run": _pairs_run("stage:data")}],
     r"stage:data is a pairs stage, which writes several files: name one of stage:data/train"),
    ([_pairs_stage(), {"name": "t", "run": _pairs_run("p.jsonl"), "init_from": "stage:data"}],
     r"init_from names pairs stage 'data', which makes pairs files, not a model"),
    ([_pairs_stage(holdout={"split": "valid"})], r"pairs.holdout.split 'valid' is not one of pairs.splits \(train, dev, test\)"),
    ([_pairs_stage(holdout={"into": ["train", "x"]})], r"must be two new names"),
    ([_pairs_stage(splits=["train", "train"])], r"names a split twice"),
    ([_pairs_stage(splits=["../up"])], r"pairs.splits: '../up' must match"),
    ([{**_pairs_stage(), "set": ["optim.lr=1"]}], r"a pairs stage trains nothing"),
])
def test_bad_pairs_stages_and_references_fail_at_load_time(tmp_path: Path, stages: list[dict], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_pipeline_config(_write(tmp_path, stages))


def test_stage_fields_are_addressed_by_stage_name(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(_pairs_run("p.jsonl")))
    path = _write(tmp_path, [_mine(), {"name": "inline", "run": _pairs_run("stage:mined")},
                             {"name": "file", "config": "task.yaml"}])
    cfg = load_pipeline_config(path, ["stages.mined.mine.range_max=30", "stages.inline.run.optim.lr=3e-5",
                                      "stages.file.run.optim.lr=4e-5", "stages.inline.objective.temperature=0.1"])
    assert cfg.stage("mined").mine.range_max == 30
    inline = build_stage_config(cfg, cfg.stage("inline"), "default", "/s", "r")
    assert inline.optim.lr == 3e-5 and inline.objective.temperature == 0.1
    assert build_stage_config(cfg, cfg.stage("file"), "default", "/s", "r").optim.lr == 4e-5  # through its `set` list


@pytest.mark.parametrize(("override", "message"), [
    ("stages.nope.run.optim.lr=1e-5", r"no stage named 'nope'"),
    ("stages.inline.run.optim.lrr=1e-5", r"optim.lrr: unknown key"),
    ("stages.mined.mine.range_maxx=10", r"range_maxx.*unknown key|range_maxx.*Extra inputs"),
])
def test_an_unknown_stage_or_field_is_refused_naming_it(tmp_path: Path, override: str, message: str) -> None:
    path = _write(tmp_path, [_mine(), {"name": "inline", "run": _pairs_run("stage:mined")}])
    with pytest.raises(ConfigError, match=message):
        load_pipeline_config(path, [override])


def test_a_system_stage_fits_a_metadata_fusion_and_refuses_one_set_by_hand(tmp_path: Path) -> None:
    metadata = {"corpus": ["reports.jsonl"], "fit": {"pairs": {"train_paths": ["train.jsonl"]}, "split": "all"}}
    system = {"retriever": "default", "select": {"pairs": {"train_paths": ["dev.jsonl"]}, "split": "all"},
              "metadata": metadata}
    cfg = load_pipeline_config(_write(tmp_path, [{"name": "system", "system": system}]))
    chosen = cfg.stage("system").system.metadata
    assert chosen.fusion.read_fields() == ["product", "component", "created"] and chosen.regularizations == [0.1, 1.0, 10.0]
    from lmplatform.retrieval.metadata_fusion import MetadataFusion
    from lmplatform.retrieval.settings import MetadataFusionConfig

    fitted = MetadataFusion(MetadataFusionConfig(), np.zeros(8), 0.0).to_dict()
    for change, message in [({"search": {"mode": "metadata"}}, r"system.search: .*mode 'metadata' needs metadata_fusion"),
                            ({"search": {"metadata_fusion": fitted}}, r"system.search: mode 'metadata' and its "
                                                                      r"metadata_fusion are chosen by the stage"),
                            ({"metadata": {**metadata, "regularizations": [1.0, 0.0]}}, r"must be > 0"),
                            ({"metadata": {**metadata, "fusion": {"pool": 0}}}, r"metadata.fusion.pool")]:
        with pytest.raises(ConfigError, match=message):
            load_pipeline_config(_write(tmp_path, [{"name": "system", "system": {**system, **change}}]))
