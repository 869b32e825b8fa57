"""What a study returns (`StudyResult`) and the tags and keys its trial runs carry: shared by the tuner, its
pipeline trials and its report."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lmplatform.tune.champion import ChampionDecision

STUDY_TAG = "lmp.tune_study"
TRIAL_TAG = "lmp.tune_trial"
RUN_ID_KEY = "mlflow_run_id"


@dataclass
class StudyResult:
    study_name: str
    experiment_path: Path
    parent_run_id: str
    tracking_uri: str
    best_trial_id: Optional[str]
    best_params: dict[str, Any]
    best_metrics: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    champion: Optional[ChampionDecision] = None
    plots: list[Path] = field(default_factory=list)
    plot_notes: list[str] = field(default_factory=list)
