"""A train trial's Ray Train run name is fixed per trial, so a restored study continues it."""
from __future__ import annotations

from pathlib import Path

from lmplatform.tune.kinds.train import trial_run


def test_a_trial_continues_its_own_run_only_when_that_run_exists(tmp_path: Path) -> None:
    name, resume = trial_run(str(tmp_path), "temperature-20261122-101010-ab12", "3f2a1b_00002")
    assert name == "temperature-20261122-101010-ab12.3f2a1b_00002" and resume is None

    (tmp_path / name).mkdir()  # what the interrupted first attempt left (checkpoints inside)
    assert trial_run(str(tmp_path), "temperature-20261122-101010-ab12", "3f2a1b_00002") == (name, name)
    # another trial of the same study, or the same trial id in another study, starts fresh
    assert trial_run(str(tmp_path), "temperature-20261122-101010-ab12", "3f2a1b_00003")[1] is None
    assert trial_run(str(tmp_path), "temperature-20261123-090000-cd34", "3f2a1b_00002")[1] is None
