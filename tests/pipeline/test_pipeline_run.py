"""A real 2-stage MLM pipeline with EWC, interrupted in stage 2 and resumed (tiny BERT, real Ray + MLflow)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import TrainWorkerKiller, committed_checkpoint_steps, write_corpus


def _stage_run(corpus: Path, *, steps: int, every: int, register: bool = False) -> dict:
    return {
        "model": {"max_seq_length": 32},
        "data": {"train_paths": [str(corpus)], "validation_fraction": 0.2},
        "objective": {"name": "mlm", "pseudo_perplexity_sentences": 0},
        "optim": {"batch_size": 8, "lr": 1e-3, "max_steps": steps},
        "scaling": {"cpus_per_worker": 1},
        "checkpoint": {"every_n_steps": every, "max_failures": 0},  # a killed worker fails the stage
        "tracking": {"log_every_n_steps": every, "register_model": register},
    }


def test_two_stage_pipeline_with_ewc_resumes_without_rerunning_stage_one(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline.config import load_pipeline_config
    from lmplatform.pipeline.runner import PIPELINE_TAG, STAGE_TAG, run_pipeline
    from lmplatform.pipeline.state import FAILED, FINISHED, PipelineState

    domain = write_corpus(tmp_path / "domain.jsonl", n=80, seed=1)
    task = write_corpus(tmp_path / "task.jsonl", n=80, seed=2)
    storage = tmp_path / "pipelines"
    old_domain = {"data": {"train_paths": [str(domain)], "validation_fraction": 0.2}, "max_texts": 16,
                  "batch_size": 8, "max_seq_length": 32}
    spec = {
        "name": "two-stage",
        "tracking": {"tracking_uri": mlflow_uri, "experiment": "pipelines"},
        "storage_path": str(storage),
        "stages": [
            {"name": "domain", "init_from": str(tiny_bert), "run": _stage_run(domain, steps=4, every=2, register=True)},
            {"name": "task", "init_from": "stage:domain", "run": _stage_run(task, steps=100, every=10),
             "ewc": {"anchor": "domain", "data": {"train_paths": [str(domain)]}, "lambda": 1e4, "samples": 12, "batch_size": 4},
             "evaluations": [{"name": "old_domain_mlm_loss", "label": "old_domain", **old_domain}]},
        ],
        "tasks": [
            {"name": "old_domain_mlm_loss", "task": "domain", **old_domain, "max_texts": 8},
            {"name": "old_domain_mlm_loss", "task": "task",
             **{**old_domain, "data": {"train_paths": [str(task)], "validation_fraction": 0.2}}, "max_texts": 8},
        ],
    }
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(spec))
    cfg = load_pipeline_config(config_path)

    # Interrupt stage 2 for real: kill its Train worker once its controller has registered a checkpoint,
    # so the kill lands mid-run. Stage 1 checkpoints at steps 2 and 4 only; stage 2's start at step 10.
    killer = TrainWorkerKiller(lambda: any(step >= 10 for step in committed_checkpoint_steps(storage)))
    killer.start()
    with pytest.raises(Exception):  # noqa: B017 - whatever Ray raises for a dead worker with max_failures=0
        run_pipeline(cfg)
    killer.join(timeout=5)
    assert killer.killed_pid, "stage 2's worker was never killed"

    (folder,) = [p.parent for p in storage.glob("*/pipeline_state.json")]
    state = PipelineState.load(folder)
    assert state.stages["domain"].status == FINISHED and state.stages["task"].status == FAILED
    assert state.stages["task"].train_run, "the failed stage's Ray run name was not recorded"
    client = MlflowClient(mlflow_uri)
    assert client.get_run(state.parent_run_id).info.status == "FAILED"
    domain_model_mtime = (Path(state.stages["domain"].model_dir) / "config.json").stat().st_mtime

    result = run_pipeline(cfg, resume=folder.name)

    state = PipelineState.load(folder)
    assert result.run_name == folder.name
    assert [state.stages[s].status for s in ("domain", "task")] == [FINISHED, FINISHED]
    assert state.stages["domain"].attempts == 1 and state.stages["task"].attempts == 2
    assert (Path(state.stages["domain"].model_dir) / "config.json").stat().st_mtime == domain_model_mtime
    # MLflow: one parent, exactly one child run per stage (stage 1 was not rerun; stage 2 continued its run)
    experiment = client.get_experiment_by_name("pipelines").experiment_id
    children = client.search_runs([experiment], filter_string=f"tags.`{PIPELINE_TAG}` = '{folder.name}' "
                                                              f"and tags.`mlflow.parentRunId` = '{state.parent_run_id}'")
    assert sorted(r.data.tags[STAGE_TAG] for r in children) == ["domain", "task"]
    task_run = next(r for r in children if r.data.tags[STAGE_TAG] == "task")
    assert task_run.info.status == "FINISHED" and task_run.info.run_id == state.stages["task"].mlflow_run_id
    resumed = client.get_metric_history(task_run.info.run_id, "resumed_from_step")
    assert resumed and resumed[0].value >= 10 and resumed[0].value % 10 == 0
    assert max(m.step for m in client.get_metric_history(task_run.info.run_id, "loss")) == 100
    # EWC was active in stage 2: penalty in the step metrics, all backbone tensors matched, Fisher logged
    penalties = [m.value for m in client.get_metric_history(task_run.info.run_id, "ewc_penalty")]
    assert penalties and max(penalties) > 0
    assert client.get_run(task_run.info.run_id).data.metrics["ewc/matched_tensors"] > 0
    assert "ewc/fisher.safetensors" in {a.path for a in client.list_artifacts(task_run.info.run_id, "ewc")}
    # stage 2 started from stage 1's model, and the forgetting table compares them on the old domain
    assert state.stages["task"].init_model == state.stages["domain"].model_dir
    (row,) = result.forgetting
    assert row["stage"] == "task" and row["ewc_lambda"] == 1e4
    assert row["mlm_loss_before"] > 0 and row["mlm_loss_after"] > 0
    parent = client.get_run(state.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["task/old_domain/mlm_loss_before"] == pytest.approx(row["mlm_loss_before"])
    # per-stage wall-clock: the resumed attempt's training is part of the stage's time (which adds its evaluations)
    assert 0 < state.stages["task"].train_seconds < state.stages["task"].seconds
    assert parent.data.metrics["task/seconds"] == pytest.approx(state.stages["task"].seconds)
    artifacts = {a.path for a in client.list_artifacts(state.parent_run_id)}
    assert {"forgetting.json", "forgetting.md", "task_matrix.json", "pipeline.json"} <= artifacts
    matrix = json.loads(Path(client.download_artifacts(state.parent_run_id, "task_matrix.json", str(tmp_path))).read_text())
    assert len(matrix["R"]) == 2 and all(0 <= v <= 1 for row in matrix["R"] for v in row)
    # R[stage][task] holds the stages' task scores, and the logged continual-learning metrics are the values
    # R and the starting model's scores define (2 stages x 2 tasks, written out by hand)
    assert matrix["tasks"] == ["domain", "task"]
    assert matrix["R"] == [[state.stages[s].task_scores[t] for t in ("domain", "task")] for s in ("domain", "task")]
    (r00, r01), (r10, r11) = matrix["R"]
    bwt = r10 - r00
    expected = {"A": (r00 + r10 + r11) / 3, "ACC_final": (r10 + r11) / 2, "BWT": bwt, "REM": 1 - abs(min(bwt, 0.0)),
                "BWT_plus": max(bwt, 0.0), "FWT_upper": r01, "FWT": r01 - matrix["baseline"]["task"]}
    assert result.continual == pytest.approx(expected)
    assert {k: parent.data.metrics[f"cl/{k}"] for k in expected} == pytest.approx(expected)
