"""What a study returns (`StudyResult`) and the tags and keys its trial runs carry: shared by the tuner, its
trial kinds and its report."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lmplatform.tracking.version_tags import OBJECTIVE_TAG
from lmplatform.tune.champion import ChampionDecision

STUDY_TAG = "lmp.tune_study"
TRIAL_TAG = "lmp.tune_trial"
RUN_ID_KEY = "mlflow_run_id"


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The numbers of a report (a trial's report may carry strings: its run id)."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def trial_pipeline_name(study: str, trial_id: str) -> str:
    """The pipeline run of a study's pipeline trial: named after the trial, so a trial run again continues it."""
    return f"{study}.{trial_id}"


def winner_tags(study_name: str, best: dict[str, Any], objective: str) -> dict[str, str]:
    """The tags a study's winning version is registered with: its study, trial, objective and parameters."""
    return {STUDY_TAG: study_name, TRIAL_TAG: best["trial_id"], OBJECTIVE_TAG: objective,
            **{f"param.{k}": str(v) for k, v in best["params"].items()}}


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
