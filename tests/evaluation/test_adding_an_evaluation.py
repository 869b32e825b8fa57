"""Adding an evaluation is its folder and one registry line: the toy evaluation of tests/evaluation/toy/ registers, its
task validates inside an evaluation config, `lmp evaluate`'s runner runs it into the report and MLflow, a pipeline
stage and the champion gate's general pack score a model with it by name, and once unregistered it is unknown again;
all from what its spec declares (a study over its settings: tests/tune/test_evaluation_trials.py)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from lmplatform.config import ConfigError
from lmplatform.evaluation import registry
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.spec import EvaluationSpec
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig
from tests.evaluation.toy import SPEC as TOY

TEXTS = ["the printer jams", "a crash on save", "fonts render badly in the dialog", "spell check ignores German"]


@pytest.fixture
def toy_registered() -> Iterator[None]:
    registry.register(TOY)
    try:
        yield
    finally:
        registry.unregister(TOY.name)


def _texts(tmp_path: Path) -> Path:
    path = tmp_path / "texts.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return path


def _evaluation(tmp_path: Path, tiny_bert: Path, **task: Any) -> dict[str, Any]:
    return {"name": "toy-eval", "output_dir": str(tmp_path / "report"), "tasks": [{
        "task": "toy_norm", "datasets": [{"name": "texts", "path": str(_texts(tmp_path))}],
        "encoders": [{"name": "tiny", "model": str(tiny_bert), "max_seq_length": 32}], **task}]}


def test_its_task_validates_in_an_evaluation_config(toy_registered: None, tiny_bert: Path, tmp_path: Path) -> None:
    cfg = load_evaluation_config(None, base=_evaluation(tmp_path, tiny_bert, target_norm=2))
    assert type(cfg.tasks[0]).__name__ == "ToyNormTask" and cfg.tasks[0].target_norm == 2.0
    with pytest.raises(ConfigError, match=r"tasks\.0\.target_norm: got -1"):
        load_evaluation_config(None, base=_evaluation(tmp_path, tiny_bert, target_norm=-1))
    assert StageEvaluationConfig(name="toy_norm", data={"train_paths": [str(tmp_path)]}).name == "toy_norm"


def test_lmp_evaluate_runs_it_into_the_report_and_mlflow(toy_registered: None, tiny_bert: Path, tmp_path: Path,
                                                         mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.evaluation.runner import run_evaluation
    from lmplatform.models.encoder import Encoder

    spec = _evaluation(tmp_path, tiny_bert, target_norm=2)
    spec["tracking"] = {"tracking_uri": mlflow_uri, "experiment": "toy-eval"}
    result = run_evaluation(load_evaluation_config(None, base=spec))

    vectors = Encoder.from_pretrained(str(tiny_bert), max_seq_length=32).encode(TEXTS, batch_size=8, normalize=False)
    expected = float(np.abs(np.linalg.norm(vectors, axis=1) - 2.0).mean())  # the config's target reached the task
    assert result.metrics == {"toy_norm.texts.tiny.norm_error": pytest.approx(expected, rel=1e-5)}
    assert "## Toy norm" in result.report_md.read_text()
    assert json.loads(result.report_json.read_text())["tasks"]["toy_norm"]["results"][0]["encoder"] == "tiny"
    logged = MlflowClient(mlflow_uri).get_run(result.mlflow_run_id).data.metrics
    assert logged["eval.toy-eval.toy_norm.texts.tiny.norm_error"] == pytest.approx(expected, rel=1e-5)


def test_a_pipeline_stage_scores_a_model_with_it_by_name(toy_registered: None, tiny_bert: Path, tmp_path: Path) -> None:
    cfg = StageEvaluationConfig(name="toy_norm", data={"train_paths": [str(_texts(tmp_path))], "validation_fraction": 0.0},
                                split="train", max_seq_length=32)
    result = registry.evaluation_spec(cfg.name).evaluate_model(str(tiny_bert), cfg, None)
    assert result.metrics["texts"] == len(TEXTS) and result.score == -result.metrics["norm_error"] < 0


def test_unregistered_it_is_unknown_again(tiny_bert: Path, tmp_path: Path) -> None:
    registry.register(TOY)
    registry.unregister(TOY.name)
    with pytest.raises(ConfigError, match="does not match any of the expected tags: 'retrieval', 'sts', 'classification'"):
        load_evaluation_config(None, base=_evaluation(tmp_path, tiny_bert))
    with pytest.raises(ValueError, match="unknown evaluation 'toy_norm'; available: old_domain_mlm_loss, retrieval"):
        StageEvaluationConfig(name="toy_norm", data={"train_paths": [str(tmp_path)]})
    with pytest.raises(ValueError, match="built in"):
        registry.unregister("sts")


def test_a_spec_that_does_not_match_its_config_fails_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match=r"its config ToyNormTask must have task: Literal\['toy_length'\]"):
        dataclasses.replace(TOY, name="toy_length")
    with pytest.raises(ValueError, match="declare a config"):
        EvaluationSpec(name="nothing", implementation="tests.evaluation.toy.task")


def test_importing_the_configs_and_the_registry_imports_no_torch() -> None:
    probe = ("import sys, lmplatform.evaluation.config, lmplatform.evaluation.stage_evaluation, "
             "lmplatform.evaluation.registry, tests.evaluation.toy; print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split() == ["False"]


def test_it_is_a_probe_of_the_champion_gate(toy_registered: None, tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.tune.gate import general_probes
    from lmplatform.tune.space import GeneralPackSpec

    pack = GeneralPackSpec(evaluations=[{"name": "toy_norm", "label": "vector length", "split": "train",
                                         "data": {"train_paths": [str(_texts(tmp_path))], "validation_fraction": 0.0},
                                         "max_seq_length": 32}])
    (probe,) = general_probes(pack, tiny_bert, tiny_bert, "biencoder")
    assert probe.name == "vector length" and probe.candidate == probe.comparator < 0 and probe.drop == 0.0
