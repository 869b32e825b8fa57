"""Pipeline trials: parameters address stage fields by stage name and are checked before any trial; a real study of
two concurrent pipeline trials (tiny BERT, real Ray Tune, MLflow) runs each shared stage once, nests study ->
pipeline -> stages in MLflow, feeds the training stage's reports to ASHA, and registers its winner."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lmplatform.tune.kinds.pipeline import trial_pipeline
from lmplatform.tune.space import SpaceError, load_space
from tests.conftest import write_duplicate_reports
from tests.pipeline.test_stage_reuse import pipeline_spec


def system_pipeline(tmp_path: Path, tiny_bert: Path, mlflow_uri: str, corpus: Path, relations: Path) -> dict:
    """pairs -> mine -> bi-encoder -> cross-encoder on the mined pairs -> the system (hybrid or a metadata fusion fitted
    on the train pairs, re-ranked) chosen on dev_select, indexed and registered."""
    pipeline = pipeline_spec(tmp_path, tiny_bert, mlflow_uri, corpus, relations)
    pipeline["reuse"] = {"enabled": False}  # a study turns it on itself
    pipeline["stages"] += [
        {"name": "rerank", "init_from": str(tiny_bert), "run": {
            "model": {"max_seq_length": 48},
            "data": {"train_paths": ["stage:mined"], "validation_paths": ["stage:data/dev_select"],
                     "hard_negative_field": "hard_negatives"},
            "objective": {"name": "cross_encoder", "negatives_per_positive": 1},
            "optim": {"batch_size": 4, "max_steps": 2, "lr": 1e-3},
            "scaling": {"cpus_per_worker": 1},
            "tracking": {"log_every_n_steps": 1, "register_model": False}}},
        {"name": "system", "system": {
            "retriever": "stage:train", "reranker": "stage:rerank", "max_seq_length": 32,
            "select": {"pairs": {"train_paths": ["stage:data/dev_select"], "validation_fraction": 0.0}, "split": "all",
                       "distractors": {"paths": [str(corpus)], "fields": ["title", "description"]}, "batch_size": 16},
            "search": {"mode": "hybrid", "hybrid_candidates": 20},
            "choose": {"bm25_weights": [0.0, 0.5], "rerank_depths": [5], "rerank_weights": [0.5, 1.0]},
            "metadata": {"corpus": [str(corpus)], "fields": ["title", "description"], "regularizations": [1.0],
                         "fit": {"pairs": {"train_paths": ["stage:data/train"], "validation_fraction": 0.0}, "split": "all",
                                 "distractors": {"paths": [str(corpus)], "fields": ["title", "description"]},
                                 "batch_size": 16}},
            "index": {"corpus": str(corpus), "fields": ["title", "description"], "kind": "flat"},
            "register_as": {"name": "pipe-system"}}},
    ]
    return pipeline


def _write(tmp_path: Path, tiny_bert: Path, mlflow_uri: str, **space: object) -> Path:
    corpus, relations = write_duplicate_reports(tmp_path / "data")
    pipeline = system_pipeline(tmp_path, tiny_bert, mlflow_uri, corpus, relations)
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    body = {
        "study": "pipe", "trial": "pipeline", "base_pipeline": str(tmp_path / "pipeline.yaml"),
        "parameters": {"stages.train.run.optim.lr": {"distribution": "loguniform", "low": 1e-4, "high": 1e-2}},
        "metric": "system/ir_mrr_at_10", "mode": "max", "num_samples": 2, "max_concurrent": 2,
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


def test_a_pipeline_space_is_checked_against_its_stages(tmp_path, tiny_bert, mlflow_uri) -> None:
    loaded = load_space(_write(tmp_path, tiny_bert, mlflow_uri))
    assert [stage.name for stage in loaded.base.stages] == ["data", "mined", "train", "rerank", "system"]
    assert trial_pipeline(loaded, {"stages.train.run.optim.lr": 0.005}).stage("train").run["optim"]["lr"] == 0.005


@pytest.mark.parametrize(("change", "message"), [
    ({"parameters": {"stages.nope.run.optim.lr": {"distribution": "choice", "values": [1e-3]}}},
     r"parameter 'stages.nope.run.optim.lr' names no stage of .*; its stages: data, mined, train, rerank, system"),
    ({"parameters": {"stages.train.run.optim.lrr": {"distribution": "choice", "values": [1e-3]}}},
     r"(?s)parameter 'stages.train.run.optim.lrr' with value 0.001 does not fit the base pipeline.*optim.lrr: unknown key"),
    ({"parameters": {"stages.mined.mine.range_max": {"distribution": "choice", "values": [0]}}},
     r"stages.mined.mine.range_max' with value 0 does not fit"),
    ({"metric": "train/val_ir_mrr_at_10"},
     r"metric 'train/val_ir_mrr_at_10' is never reported by a trial of .*train/val_ranking_loss"),
    ({"scheduler": {"name": "asha", "metric": "mined/anything"}}, r"metric 'mined/anything' is never reported"),
    # a trial's training stages skip the validation of their start model, so its _initial copy never comes
    ({"scheduler": {"name": "asha", "metric": "train/val_ranking_loss_initial", "mode": "min"}},
     r"metric 'train/val_ranking_loss_initial' is never reported"),
    ({"scheduler": {"name": "fifo", "metric": "train/val_ranking_loss"}}, r"the fifo scheduler stops nothing"),
    ({"champion": {"stage": "mined"}}, r"champion.stage 'mined' is not a training or system stage .*; those stages: train, "
                                       r"rerank, system"),
    ({"base_pipeline": "nowhere.yaml"}, r"base_pipeline 'nowhere.yaml' not found"),
])
def test_an_unknown_stage_field_or_metric_is_refused_before_any_trial(
    tmp_path, tiny_bert, mlflow_uri, change: dict, message: str
) -> None:
    with pytest.raises(SpaceError, match=message):
        load_space(_write(tmp_path, tiny_bert, mlflow_uri, **change))


def test_a_study_of_pipelines_shares_stages_nests_runs_and_registers_its_winner(
    ray_session, tiny_bert, mlflow_uri, tmp_path
) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline.runner import REUSED_TAG, STAGE_TAG
    from lmplatform.pipeline.state import PipelineState
    from lmplatform.tune.results import TRIAL_TAG
    from lmplatform.tune.tuner import run_study

    result = run_study(_write(tmp_path, tiny_bert, mlflow_uri), verbose=0)
    assert len(result.trials) == 2 and {t["status"] for t in result.trials} == {"TERMINATED"}
    # the training stage reported at every validation while it ran, under its stage's name; the system stage at the end
    for trial in result.trials:
        assert trial["iterations"] >= 3 and "train/val_inbatch_mrr" in trial["metrics"]
        metrics = trial["metrics"]
        assert {"system/ir_mrr_at_10", "system/dense_ir_mrr_at_10", "system/first_stage_ir_mrr_at_10"} <= set(metrics)
        assert metrics["system/bm25_weight"] in (0.0, 0.5) and metrics["system/rerank_depth"] == 5
    states = [PipelineState.load(tmp_path / "pipelines" / f"{result.study_name}.{t['trial_id']}") for t in result.trials]
    # no trial validated its start model, which the study never reads
    assert all(state.stages["train"].metrics and not any(k.endswith("_initial") for k in state.stages["train"].metrics)
               for state in states)
    # The two trials ran together: each stage no parameter changes (pairs, mining, the re-ranker on the mined pairs)
    # ran in the trial that got to it first, and the other waited for it and reused it.
    reused = [name for state in states for name, s in state.stages.items() if s.reused_from]
    assert sorted(reused) == ["data", "mined", "rerank"]
    origin, reuser = sorted(states, key=lambda state: bool(state.stages["rerank"].reused_from))
    # a reused training stage is its origin's model and metrics, under its own MLflow run pointing at the origin's
    assert reuser.stages["rerank"].model_dir == origin.stages["rerank"].model_dir
    assert reuser.stages["rerank"].metrics == origin.stages["rerank"].metrics and origin.stages["rerank"].metrics
    assert sum(t["metrics"]["stages_reused"] for t in result.trials) == 3

    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("reuse").experiment_id
    pipelines = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'")
    assert sorted(r.data.tags[TRIAL_TAG] for r in pipelines) == sorted(t["trial_id"] for t in result.trials)
    for pipeline in pipelines:
        stages = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{pipeline.info.run_id}'")
        assert sorted(r.data.tags[STAGE_TAG] for r in stages) == ["data", "mined", "rerank", "system", "train"]
        assert "stages.train.run.optim.lr" in pipeline.data.params
    ran = client.search_runs([experiment], filter_string="tags.`lmp.stage_kind` = 'mine'")
    assert len(ran) == 1  # mining ran once for the study
    assert len(client.search_runs([experiment], filter_string=f"tags.`{REUSED_TAG}` != ''")) == 3
    reused_rerank = client.get_run(reuser.stages["rerank"].mlflow_run_id)
    assert reused_rerank.data.tags["lmp.reused_mlflow_run"] == origin.stages["rerank"].mlflow_run_id
    assert not client.search_registered_models(filter_string="name = 'pipe-system'")  # trials register nothing

    # The winner: the best trial's system, its bi-encoder registered with the index, settings and re-ranker it was
    # measured with (before the gate, which compared it as a system on the trial's own dev_confirm file).
    decision = result.champion
    assert decision is not None and decision.registered_model == "pipe-winner"
    version = client.get_model_version("pipe-winner", decision.version)
    best = next(state for state, t in zip(states, result.trials) if t["trial_id"] == result.best_trial_id)
    assert version.run_id == best.stages["train"].model_run_id == best.stages["system"].model_run_id
    assert version.tags["lmp.gate.metric"] == "ir_mrr_at_10" and int(version.tags["lmp.gate.queries"]) > 0
    from lmplatform.tracking.registry import read_search_settings

    settings = read_search_settings(mlflow_uri, "pipe-winner", decision.version)
    assert settings.mode == best.stages["system"].search["mode"] and settings.mode in ("hybrid", "metadata")
    assert settings.bm25_weight == best.stages["system"].search["bm25_weight"]
    # the fusion fitted on the trial's train pairs travels with the version, and the served store keeps what it reads
    assert settings.metadata_fusion.config.match_fields == ["product", "component"]
    store = client.download_artifacts(version.run_id, "index/documents.jsonl")
    assert all({"product", "component", "created"} <= json.loads(line)["metadata"].keys() for line in open(store))
    assert settings.reranker == "models:/pipe-winner-reranker/1" and settings.rerank_depth == 5
    assert client.get_model_version("pipe-winner-reranker", "1").run_id == best.stages["rerank"].model_run_id
    # each version names the objective its training run trained: the system's is its retriever's
    assert version.tags["objective"] == "biencoder"
    assert client.get_model_version("pipe-winner-reranker", "1").tags["objective"] == "cross_encoder"
    served = {a.path for a in client.list_artifacts(version.run_id, "index")}
    assert {"index/index.faiss", "index/documents.jsonl", "index/bm25"} <= served
