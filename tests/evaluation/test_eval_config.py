from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.data.readers import DataError
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.runner import run_evaluation

ENCODERS = [{"name": "e", "model": "default"}]


def config(task: dict) -> dict:
    return {"tracking": {"enabled": False}, "tasks": [task]}


@pytest.mark.parametrize("task, message", [
    ({"task": "sts", "datasets": [{"name": "d", "path": "p", "scale": [5, 0]}], "encoders": ENCODERS},
     r"tasks.0.datasets.0: .*scale must be \[low, high\] with high > low"),
    ({"task": "sts", "datasets": [{"name": "d", "path": "p"}], "encoders": [{"name": "e"}]},
     r"encoders.0.model: required field is missing"),
    ({"task": "classification", "datasets": [{"name": "d", "path": "p", "train": "t"}], "encoders": ENCODERS},
     r"give either path \(with a split field\) or train/dev/test files, not both"),
    ({"task": "classification", "datasets": [{"name": "d", "train": "t"}], "encoders": ENCODERS},
     r"needs path \(with a split field\) or both train and test files"),
    ({"task": "classification", "datasets": [{"name": "d", "path": "p"}], "encoders": ENCODERS, "head": {"depth": 0}},
     r"head.depth: got 0; Input should be greater than or equal to 1"),
    ({"task": "classification", "datasets": [{"name": "d", "path": "p"}], "encoders": [*ENCODERS, *ENCODERS]},
     r"encoder names must be unique"),
    ({"task": "classification", "datasets": [{"name": "d", "path": "p"}],
      "encoders": [{"name": "e", "model": "default", "quantize": "int4"}]},
     r"encoders.0.quantize: got 'int4'; Input should be 'int8'"),
    ({"task": "similarity"}, r"expected tags: 'retrieval', 'sts', 'classification'"),
])
def test_bad_task_config_names_the_field(task: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_evaluation_config(None, base=config(task))


def test_two_tasks_of_one_kind_are_refused_since_the_second_would_overwrite_the_first() -> None:
    sts = {"task": "sts", "datasets": [{"name": "d", "path": "p"}], "encoders": ENCODERS}
    with pytest.raises(ConfigError, match=r"more than one 'sts' task; list all its datasets .* in one task"):
        load_evaluation_config(None, base={"tracking": {"enabled": False}, "tasks": [sts, sts]})


def test_missing_file_of_a_later_task_fails_before_any_task_runs(tmp_path: Path) -> None:
    sts_file = tmp_path / "pairs.jsonl"
    sts_file.write_text('{"sentence1": "a", "sentence2": "b", "score": 1}\n')
    cfg = load_evaluation_config(None, base={
        "output_dir": str(tmp_path / "out"), "tracking": {"enabled": False},
        "tasks": [{"task": "sts", "datasets": [{"name": "s", "path": str(sts_file)}], "encoders": ENCODERS},
                  {"task": "classification", "datasets": [{"name": "c", "train": str(tmp_path / "train.jsonl"),
                                                           "test": str(sts_file)}], "encoders": ENCODERS}],
    })
    with pytest.raises(DataError, match=r"tasks.1 \(classification\) dataset 'c' field 'train': file not found: .*train.jsonl"):
        run_evaluation(cfg)
    assert not (tmp_path / "out" / "report.json").exists()
