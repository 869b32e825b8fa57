"""Evaluation trials: a study over a registered evaluation's settings (`trial: evaluation`). Parameters address the
evaluation config's fields, list entries by name, checked before any trial; each trial runs the evaluation as
`lmp evaluate` does, into its own MLflow child run, and reports the report's metrics."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lmplatform.tune.space import SpaceError, load_space

REPO = Path(__file__).resolve().parents[2]
METRIC = "sts.general.tiny.spearman"


def _space(folder: Path, tiny_bert: Path, mlflow_uri: str, parameter: str, metric: str = METRIC) -> Path:
    evaluation = folder / "sts.yaml"
    evaluation.write_text(textwrap.dedent(f"""\
        name: sts-tiny
        tasks:
          - task: sts
            datasets: [{{name: general, path: {REPO / 'data/general/sts_pairs.jsonl'}, scale: [0.0, 5.0], limit: 40}}]
            encoders: [{{name: tiny, model: {tiny_bert}, max_seq_length: 32}}]
        tracking: {{tracking_uri: '{mlflow_uri}', experiment: evaluation-trials}}
        """))
    space = folder / "space.yaml"
    space.write_text(textwrap.dedent(f"""\
        study: sts-settings
        trial: evaluation
        base_evaluation: {evaluation}
        parameters:
          {parameter}
        metric: {metric}
        mode: max
        num_samples: 2
        seed: 0                  # TPE's first two draws of the choice differ under this seed
        max_concurrent: 2        # an evaluation trial takes 1 CPU: both at once on the session's 2
        scheduler: {{name: fifo}}
        storage_path: {folder / 'tune'}
        """))
    return space


CHOICE = "tasks.sts.encoders.tiny.max_seq_length: {distribution: choice, values: [8, 32]}"


def test_an_evaluation_space_is_checked_against_its_config(tiny_bert: Path, tmp_path: Path, mlflow_uri: str) -> None:
    loaded = load_space(_space(tmp_path, tiny_bert, mlflow_uri, CHOICE))
    assert loaded.base is not None and loaded.base.tasks[0].encoders[0].max_seq_length == 32
    refusals = [
        ("tasks.sts.encoders.huge.max_seq_length: {distribution: choice, values: [8]}",
         METRIC, r"tasks.sts.encoders has no entry 'huge'; its entries: tiny"),
        ("tasks.retrieval.ks: {distribution: choice, values: [[1]]}", METRIC,
         r"tasks has no entry 'retrieval'; its entries: sts"),
        ("tasks.sts.encoders.tiny.max_seq_length: {distribution: choice, values: [4]}", METRIC,
         r"space.yaml:5: parameter 'tasks.sts.encoders.tiny.max_seq_length' with value 4 does not fit(.|\n)*greater than or "
         r"equal to 8"),
        (CHOICE, "sts.other.tiny.spearman", r"metric 'sts.other.tiny.spearman' is not one .* task sts: datasets general"),
    ]
    for parameter, metric, message in refusals:
        with pytest.raises(SpaceError, match=message):
            load_space(_space(tmp_path, tiny_bert, mlflow_uri, parameter, metric))


def test_a_study_of_evaluation_trials_reports_each_trials_evaluation(
    ray_session, tiny_bert: Path, tmp_path: Path, mlflow_uri: str
) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.tune.tuner import run_study

    study = run_study(_space(tmp_path, tiny_bert, mlflow_uri, CHOICE), verbose=0)
    assert [t["status"] for t in study.trials] == ["TERMINATED", "TERMINATED"]
    client = MlflowClient(mlflow_uri)
    spearman = {}
    for trial in study.trials:
        run = client.get_run(trial["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == study.parent_run_id
        length = int(run.data.params["tasks.sts.encoders.tiny.max_seq_length"])
        # the trial's value reached the evaluation: its report (logged to the trial's run) names it
        assert run.data.metrics[f"eval.sts-tiny.{METRIC}"] == pytest.approx(trial["metrics"][METRIC])
        report = client.download_artifacts(run.info.run_id, "evaluation/sts-tiny/report.json", str(tmp_path / trial["trial_id"]))
        assert f'"max_seq_length": {length}' in Path(report).read_text()
        spearman[length] = trial["metrics"][METRIC]
    assert set(spearman) == {8, 32} and spearman[8] != spearman[32]  # 8 tokens cut the sentences: another score
    assert study.best_metrics[METRIC] == pytest.approx(max(spearman.values()))
