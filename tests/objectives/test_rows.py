"""`ObjectiveSpec.rows`, an objective's data read in this process without Ray (the GPU benches feed it to the worker's
`Trainer`), holds the rows its `prepare_data` hands to Ray Data, split by split."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import load_run_config
from tests.conftest import TOKEN_WORDS, write_corpus


def _plain(value: Any) -> Any:
    if isinstance(value, (np.ndarray, list)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _comparable(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    """The rows' `columns`, as sorted JSON (Ray Data may hand blocks back in another order)."""
    return sorted(json.dumps({c: _plain(row[c]) for c in columns}, sort_keys=True) for row in rows)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _data(name: str, folder: Path) -> tuple[Path, list[str]]:
    """A small file of the objective's kind of data, and the overrides that read it."""
    rng = random.Random(0)

    def words(n: int) -> str:
        return " ".join(rng.sample(TOKEN_WORDS, n))

    if name in ("mlm", "declutr"):
        spans = ["objective.min_span=2", "objective.max_span=4"] if name == "declutr" else []
        return write_corpus(folder / "corpus.jsonl", n=60), spans
    if name in ("biencoder", "cross_encoder"):
        pairs = _write(folder / "pairs.jsonl", [{"q": words(4), "d": words(5), "neg": [words(4)]} for _ in range(40)])
        return pairs, ["data.query_field=q", "data.document_field=d", "data.hard_negative_field=neg"] + (
            ["objective.negatives_per_positive=2"] if name == "cross_encoder" else [])
    if name == "sts":
        return _write(folder / "sts.jsonl", [{"sentence1": words(4), "sentence2": words(4), "score": rng.uniform(0, 5)}
                                             for _ in range(40)]), []
    if name == "classifier":
        return _write(folder / "labelled.jsonl", [{"text": words(6), "label": rng.choice(["disk", "print", "mail"])}
                                                  for _ in range(40)]), []
    raise AssertionError(name)


# mlm and declutr: `prepare_data` reads the corpus lazily through Ray Data, `rows` in this process. The pair, STS and
# classifier objectives build both from one function of the rows read (cross_encoder's negatives stand for them).
@pytest.mark.parametrize("name", ["mlm", "declutr", "cross_encoder"])
def test_rows_are_what_prepare_data_hands_to_ray_data(ray_session, tiny_bert: Path, tmp_path: Path, name: str) -> None:
    data, overrides = _data(name, tmp_path)
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", f"data.train_paths=[{data}]",
                                 "data.validation_fraction=0.25", f"objective.name={name}", *overrides])
    spec = objective_spec(name)
    rows = spec.rows(cfg)
    prepared = spec.prepare_data(cfg)

    assert rows["train"] and rows["validation"] and len(rows["train"]) == prepared.train_examples
    columns = sorted(rows["train"][0])
    for split in ("train", "validation"):
        assert _comparable(rows[split], columns) == _comparable(prepared.datasets[split].take_all(), columns), split


def test_planned_batches_have_no_ray_free_rows(tiny_bert: Path) -> None:
    from lmplatform.config import ConfigError

    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "data.train_paths=[unused.jsonl]",
                                 "objective.name=biencoder", "objective.group_aware_batches=true", "data.group_field=g"])
    with pytest.raises(ConfigError, match="objective.group_aware_batches: the driver plans each rank's batches"):
        objective_spec("biencoder").rows(cfg)
