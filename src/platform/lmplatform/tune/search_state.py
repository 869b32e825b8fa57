"""A killed study's saved search state, made consistent with its saved trials before `Tuner.restore`.

Ray Tune (2.60) writes a study's trial list (experiment_state-*.json) and then its search state
(search_gen_state-*.json) at each checkpoint, and a trial the searcher has just suggested can be in the
second without being in the first yet. A driver killed after such a checkpoint leaves a search state that
counts a trial no restore brings back: the ConcurrencyLimiter keeps a slot for it (with one trial at a time
the restored study waits forever) and the generator counts it (the study would run one trial too few).
"""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path

SEARCH_STATE_PATTERN = "search_gen_state-*.json"
TRIAL_LIST_PATTERN = "experiment_state-*.json"
LIMITER_KEY = "name:ConcurrencyLimiter"


def _newest(experiment_path: Path, pattern: str) -> Path | None:
    # Tune names both files after its session's start time, and restores from the newest of each.
    found = glob.glob(str(experiment_path / pattern))
    return Path(max(found)) if found else None


def saved_trial_ids(experiment_path: Path) -> set[str]:
    """The ids of the trials in a study's newest saved trial list."""
    trial_list = _newest(experiment_path, TRIAL_LIST_PATTERN)
    if trial_list is None:
        return set()
    return {json.loads(meta)["trial_id"] for meta, _ in json.loads(trial_list.read_text())["trial_data"]}


def forget_unsaved_trials(experiment_path: Path) -> list[str]:
    """Drop from the search state the trials the trial list lacks; returns their ids (empty when consistent)."""
    import ray.cloudpickle as cloudpickle

    search_state_file = _newest(experiment_path, SEARCH_STATE_PATTERN)
    if search_state_file is None:
        return []
    trial_ids = saved_trial_ids(experiment_path)
    state = cloudpickle.loads(search_state_file.read_bytes())
    limiter = state.get(LIMITER_KEY)
    unsaved = sorted(set(limiter["live_trials"]) - trial_ids) if limiter else []
    if limiter:
        limiter["live_trials"] = set(limiter["live_trials"]) & trial_ids
        limiter["num_unfinished_live_trials"] = len(limiter["live_trials"])
    recount = state["counter"] > len(trial_ids)
    if not unsaved and not recount:
        return []
    state["counter"] = min(state["counter"], len(trial_ids))
    tmp = search_state_file.with_name(f".{search_state_file.name}.tmp")
    tmp.write_bytes(cloudpickle.dumps(state))
    os.replace(tmp, search_state_file)
    return unsaved
