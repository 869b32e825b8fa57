"""The optional `ewc:` block of a run config."""
from __future__ import annotations

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.objectives.run_config import RunConfig, load_run_config

BASE = ["data.train_paths=a.jsonl"]


def test_lambda_is_written_lambda_and_survives_a_dump_round_trip() -> None:
    cfg = load_run_config(None, [*BASE, "ewc.lambda=1e6", "ewc.fisher_path=runs:/abc/ewc/fisher.safetensors"])
    assert cfg.ewc.lambda_ == 1e6 and cfg.ewc.samples == 7000 and cfg.ewc.loss == "mlm"
    # the worker re-validates the dumped config
    assert RunConfig.model_validate(cfg.model_dump(mode="json")).ewc == cfg.ewc
    assert load_run_config(None, BASE).ewc is None


@pytest.mark.parametrize("overrides, message", [
    (["ewc.lambda=0", "ewc.fisher_path=f"], "ewc.lambda: got 0"),
    (["ewc.lambda=1"], "set exactly one of ewc.fisher_path"),
    (["ewc.lambda=1", "ewc.fisher_path=f", "ewc.fisher_from.train_paths=x"], "set exactly one of ewc.fisher_path"),
    (["ewc.lamda=1", "ewc.fisher_path=f"], "ewc.lamda: unknown key"),
    (["ewc.lambda=1", "ewc.fisher_path=f", "ewc.loss=nll"], "ewc.loss: got 'nll'"),
])
def test_bad_ewc_blocks_name_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_run_config(None, [*BASE, *overrides])
