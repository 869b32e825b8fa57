"""The pipeline state file round-trips, and files written before a field existed still load."""
from __future__ import annotations

import json
from pathlib import Path

from lmplatform.pipeline.state import FINISHED, PipelineState


def test_state_round_trips_and_older_files_without_timings_load(tmp_path: Path) -> None:
    state = PipelineState("p", "p-1", "run-id", "sqlite:///x.db")
    record = state.stage("domain")
    record.status, record.train_seconds, record.seconds = FINISHED, 12.5, 20.25
    state.save(tmp_path)
    loaded = PipelineState.load(tmp_path)
    assert loaded.stages["domain"].seconds == 20.25 and loaded.stages["domain"].train_seconds == 12.5

    raw = json.loads(PipelineState.path(tmp_path).read_text())
    for stage in raw["stages"].values():
        del stage["seconds"], stage["train_seconds"]
    PipelineState.path(tmp_path).write_text(json.dumps(raw))
    older = PipelineState.load(tmp_path)
    assert older.stages["domain"].status == FINISHED and older.stages["domain"].seconds is None
