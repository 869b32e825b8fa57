"""Stage reuse on a real pairs -> mine pipeline (tiny BERT, real Ray and MLflow): what did not change is taken from
the first run, what changed runs again, and MLflow says which is which."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import write_duplicate_reports


def pipeline_spec(tmp_path: Path, tiny_bert: Path, mlflow_uri: str, corpus: Path, relations: Path) -> dict:
    """pairs (dev cut in two) -> mine with the start model -> a bi-encoder on the mined pairs, validated on dev_select."""
    return {
        "name": "reuse",
        "tracking": {"tracking_uri": mlflow_uri, "experiment": "reuse"},
        "storage_path": str(tmp_path / "pipelines"),
        "reuse": {"enabled": True},
        "stages": [
            {"name": "data", "pairs": {"corpus": str(corpus), "relations": str(relations),
                                       "holdout": {"split": "dev", "into": ["dev_select", "dev_confirm"]}}},
            {"name": "mined", "init_from": str(tiny_bert), "mine": {
                "pairs": {"train_paths": ["stage:data/train"], "group_field": "group"},
                "distractors": {"paths": [str(corpus)], "fields": ["title", "description"]},
                "num_negatives": 1, "range_min": 0, "range_max": 10, "relative_margin": None, "max_seq_length": 32}},
            {"name": "train", "init_from": str(tiny_bert), "run": {
                "model": {"max_seq_length": 32},
                "data": {"train_paths": ["stage:mined"], "validation_paths": ["stage:data/dev_select"],
                         "hard_negative_field": "hard_negatives"},
                "objective": {"name": "biencoder", "max_hard_negatives": 1},
                "optim": {"batch_size": 8, "max_steps": 2, "lr": 1e-3},
                "scaling": {"cpus_per_worker": 1},
                "tracking": {"log_every_n_steps": 1, "eval_every_n_steps": 1, "register_model": False}}},
        ],
    }


def test_unchanged_stages_are_reused_and_a_changed_one_runs_again(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    # A training stage's reuse is checked by the pipeline study (tests/tune/test_pipeline_trials.py).
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline.config import load_pipeline_config
    from lmplatform.pipeline.runner import REUSED_TAG, run_pipeline

    corpus, relations = write_duplicate_reports(tmp_path / "data")
    spec = pipeline_spec(tmp_path, tiny_bert, mlflow_uri, corpus, relations)
    spec["stages"] = [stage for stage in spec["stages"] if stage["name"] in ("data", "mined")]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec))

    first = run_pipeline(load_pipeline_config(path))
    assert not any(s.reused_from for s in first.state.stages.values())
    changed = run_pipeline(load_pipeline_config(path, ["stages.mined.mine.range_min=2"]))
    again = run_pipeline(load_pipeline_config(path, ["stages.mined.mine.range_min=2"]))

    data, mined = changed.state.stages["data"], changed.state.stages["mined"]
    assert data.reused_from == f"{first.run_name}/data" and data.outputs == first.state.stages["data"].outputs
    assert mined.reused_from is None  # its window changed
    assert {name: s.reused_from for name, s in again.state.stages.items()} == {
        "data": f"{first.run_name}/data", "mined": f"{changed.run_name}/mined"}
    assert again.state.stages["mined"].output_path == mined.output_path
    # the second mining took the texts' vectors from the first: one encoding for both
    assert len(list((tmp_path / "pipelines" / "stage-cache" / "vectors").glob("mine-*.npy"))) == 1

    client = MlflowClient(mlflow_uri)
    reused = client.get_run(again.state.stages["mined"].mlflow_run_id)
    assert reused.data.tags[REUSED_TAG] == f"{changed.run_name}/mined"
    assert reused.data.tags["mlflow.parentRunId"] == again.parent_run_id
    assert reused.data.tags["lmp.reused_mlflow_run"] == mined.mlflow_run_id
    counts = [client.get_run(r.parent_run_id).data.metrics["stages_reused"] for r in (first, changed, again)]
    assert counts == [0, 1, 2]
    runs = client.search_runs([reused.info.experiment_id], filter_string="tags.`lmp.stage_kind` = 'mine'")
    assert len(runs) == 2  # mining ran twice (two windows); the third pipeline's mined stage points at the second
