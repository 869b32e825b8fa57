"""Pipeline trials: parameters address stage fields by stage name and are checked before any trial; a real study of
two concurrent pipeline trials (tiny BERT, real Ray Tune, MLflow) runs each shared stage once, nests study ->
pipeline -> stages in MLflow, feeds the training stage's reports to ASHA, and registers its winner."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lmplatform.tune.space import SpaceError, load_space
from tests.conftest import write_duplicate_reports
from tests.pipeline.test_stage_reuse import pipeline_spec


def _write(tmp_path: Path, tiny_bert: Path, mlflow_uri: str, **space: object) -> Path:
    corpus, relations = write_duplicate_reports(tmp_path / "data")
    pipeline = pipeline_spec(tmp_path, tiny_bert, mlflow_uri, corpus, relations)
    pipeline["reuse"] = {"enabled": False}  # a study turns it on itself
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    body = {
        "study": "pipe", "trial": "pipeline", "base_pipeline": str(tmp_path / "pipeline.yaml"),
        "parameters": {"stages.train.run.optim.lr": {"distribution": "loguniform", "low": 1e-4, "high": 1e-2}},
        "metric": "train/val_inbatch_mrr", "mode": "max", "num_samples": 2, "max_concurrent": 2,
        "scheduler": {"name": "asha", "metric": "train/val_ranking_loss", "mode": "min", "grace_period": 50, "max_t": 100},
        "storage_path": str(tmp_path / "tune"),
        "champion": {"registered_model": "pipe-winner", "confirm_metric": "ir_mrr_at_10", "confirm": {
            "pairs": {"train_paths": ["stage:data/dev_confirm"], "validation_fraction": 0.0}, "split": "all",
            "distractors": {"paths": [str(corpus)], "fields": ["title", "description"]}}},
        **space,
    }
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_a_pipeline_space_is_checked_against_its_stages(tmp_path, tiny_bert, mlflow_uri) -> None:  # noqa: ANN001
    loaded = load_space(_write(tmp_path, tiny_bert, mlflow_uri))
    assert [stage.name for stage in loaded.base_pipeline.stages] == ["data", "mined", "train"]
    assert loaded.trial_pipeline({"stages.train.run.optim.lr": 0.005}).stage("train").run["optim"]["lr"] == 0.005


@pytest.mark.parametrize(("change", "message"), [
    ({"parameters": {"stages.nope.run.optim.lr": {"distribution": "choice", "values": [1e-3]}}},
     r"parameter 'stages.nope.run.optim.lr' names no stage of .*; its stages: data, mined, train"),
    ({"parameters": {"stages.train.run.optim.lrr": {"distribution": "choice", "values": [1e-3]}}},
     r"(?s)parameter 'stages.train.run.optim.lrr' with value 0.001 does not fit the base pipeline.*optim.lrr: unknown key"),
    ({"parameters": {"stages.mined.mine.range_max": {"distribution": "choice", "values": [0]}}},
     r"stages.mined.mine.range_max' with value 0 does not fit"),
    ({"metric": "train/val_ir_mrr_at_10"}, r"metric 'train/val_ir_mrr_at_10' is never reported by a trial of .*train/val_ranking_loss"),
    ({"scheduler": {"name": "asha", "metric": "mined/anything"}}, r"metric 'mined/anything' is never reported"),
    ({"scheduler": {"name": "fifo", "metric": "train/val_ranking_loss"}}, r"the fifo scheduler stops nothing"),
    ({"champion": {"stage": "mined"}}, r"champion.stage 'mined' is not a training stage .*; its training stages: train"),
    ({"base_pipeline": "nowhere.yaml"}, r"base_pipeline 'nowhere.yaml' not found"),
])
def test_an_unknown_stage_field_or_metric_is_refused_before_any_trial(
    tmp_path, tiny_bert, mlflow_uri, change: dict, message: str  # noqa: ANN001
) -> None:
    with pytest.raises(SpaceError, match=message):
        load_space(_write(tmp_path, tiny_bert, mlflow_uri, **change))


def test_a_study_of_pipelines_shares_stages_nests_runs_and_registers_its_winner(
    ray_session, tiny_bert, mlflow_uri, tmp_path  # noqa: ANN001
) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline.runner import REUSED_TAG, STAGE_TAG
    from lmplatform.pipeline.state import PipelineState
    from lmplatform.tune.tuner import TRIAL_TAG, run_study

    result = run_study(_write(tmp_path, tiny_bert, mlflow_uri), verbose=0)
    assert len(result.trials) == 2 and {t["status"] for t in result.trials} == {"TERMINATED"}
    # the training stage reported at every validation while it ran, under its stage's name
    assert all(t["iterations"] >= 3 and "train/val_inbatch_mrr" in t["metrics"] for t in result.trials)
    states = [PipelineState.load(tmp_path / "pipelines" / f"{result.study_name}.{t['trial_id']}") for t in result.trials]
    # The two trials started together: one ran the pairs and mine stages, the other waited for it and reused them.
    reused = sorted(sum(bool(s.reused_from) for s in state.stages.values()) for state in states)
    assert reused == [0, 2]
    assert sum(t["metrics"]["stages_reused"] for t in result.trials) == 2

    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("reuse").experiment_id
    pipelines = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'")
    assert sorted(r.data.tags[TRIAL_TAG] for r in pipelines) == sorted(t["trial_id"] for t in result.trials)
    for pipeline in pipelines:
        stages = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{pipeline.info.run_id}'")
        assert sorted(r.data.tags[STAGE_TAG] for r in stages) == ["data", "mined", "train"]
        assert "stages.train.run.optim.lr" in pipeline.data.params
    ran = client.search_runs([experiment], filter_string="tags.`lmp.stage_kind` = 'mine'")
    assert len(ran) == 1  # mining ran once for the study
    assert len(client.search_runs([experiment], filter_string=f"tags.`{REUSED_TAG}` != ''")) == 2

    decision = result.champion  # registered from the best trial's train stage, judged on its own dev_confirm file
    assert decision is not None and decision.registered_model == "pipe-winner"
    version = client.get_model_version("pipe-winner", decision.version)
    best = next(state for state, t in zip(states, result.trials) if t["trial_id"] == result.best_trial_id)
    assert version.run_id == best.stages["train"].model_run_id
    assert version.tags["lmp.gate.metric"] == "ir_mrr_at_10" and int(version.tags["lmp.gate.queries"]) > 0
