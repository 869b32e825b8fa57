"""The pipeline's state file: which stages finished, and what they produced.

It lives at <storage>/<pipeline run>/pipeline_state.json and is rewritten
atomically after every change, so a crash never leaves half a file.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from lmplatform.pipeline.spec import STAGE_PREFIX

STATE_FILE = "pipeline_state.json"
PENDING, RUNNING, FAILED, FINISHED = "pending", "running", "failed", "finished"
# Tags of the MLflow runs of a pipeline and its stages.
PIPELINE_TAG = "lmp.pipeline_run"
STAGE_TAG = "lmp.pipeline_stage"


@dataclass
class StageState:
    status: str = PENDING
    attempts: int = 0
    init_model: Optional[str] = None
    train_run: Optional[str] = None  # the Ray Train run name (resumable with run_training(resume=...))
    mlflow_run_id: Optional[str] = None
    model_run_id: Optional[str] = None  # the MLflow run whose artifacts hold the model (another pipeline's, when reused)
    model_dir: Optional[str] = None
    output_path: Optional[str] = None  # a mine stage's pairs file
    outputs: dict[str, str] = field(default_factory=dict)  # a pairs stage's files, by split
    model_artifact_uri: Optional[str] = None
    registered_model: Optional[str] = None
    model_version: Optional[str] = None
    ewc_lambda: Optional[float] = None
    before: dict[str, dict[str, float]] = field(default_factory=dict)  # evaluation label -> metrics on the start model
    after: dict[str, dict[str, float]] = field(default_factory=dict)
    task_scores: dict[str, float] = field(default_factory=dict)
    error: Optional[str] = None
    metrics: dict[str, float] = field(default_factory=dict)  # a training stage's final report; a mine stage's counts
    search: dict[str, Any] = field(default_factory=dict)  # a system stage's chosen SearchSettings
    reranker_run_id: Optional[str] = None  # a system stage's re-ranker: the MLflow run holding it
    # Wall-clock seconds of the last attempt: the training run, and the stage with its evaluations.
    train_seconds: Optional[float] = None
    seconds: Optional[float] = None
    started_at: Optional[float] = None  # Unix time of the last attempt's start and end
    finished_at: Optional[float] = None
    cache_key: Optional[str] = None
    reused_from: Optional[str] = None  # "<pipeline run>/<stage>" whose outputs this stage reused


@dataclass
class PipelineState:
    pipeline: str
    run_name: str
    parent_run_id: str
    tracking_uri: str
    stages: dict[str, StageState] = field(default_factory=dict)
    baseline_task_scores: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def path(folder: Path) -> Path:
        return folder / STATE_FILE

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        target = self.path(folder)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        os.replace(tmp, target)

    @classmethod
    def load(cls, folder: Path) -> "PipelineState":
        data: dict[str, Any] = json.loads(cls.path(folder).read_text())
        stages = {name: StageState(**value) for name, value in data.pop("stages", {}).items()}
        return cls(stages=stages, **data)

    def stage(self, name: str) -> StageState:
        return self.stages.setdefault(name, StageState())


def resolve_stage_model(reference: str, state: PipelineState) -> str:
    """A model reference with `stage:<name>` replaced by that finished stage's model folder."""
    if reference.startswith(STAGE_PREFIX):
        name = reference[len(STAGE_PREFIX):]
        record = state.stages.get(name)
        if record is None or record.status != FINISHED or not record.model_dir:
            raise RuntimeError(f"{reference}: that stage has not finished")
        return record.model_dir
    return reference
