"""Evaluation trials: each trial runs a registered evaluation (`trial: evaluation`, `base_evaluation:`) with its values.

- Parameters address the evaluation config's fields, a list's entries by name (`tasks.classification.knn_k`,
  `tasks.retrieval.retrievers.hybrid.hybrid.rrf_k`), applied as overrides of the config.
- The evaluation runs as `lmp evaluate` runs it (`evaluation/runner.py`: every task by its registered spec), into the
  trial's own folder; its report and PNGs are logged to the trial's MLflow run, a child of the study's.
- The trial reports every metric of the report once (`<task>.<dataset>...`), so a study targets any of them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.runner import run_evaluation
from lmplatform.tracking.mlflow_tracking import TrackedRun
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG
from lmplatform.tune.space import param_overrides
from lmplatform.tune.trial_spec import StudyRun


def evaluation_trial(config: dict[str, Any], *, base_evaluation: str, overrides: list[str], study: StudyRun) -> None:
    """One evaluation trial: the base evaluation with the trial's values, logged into the trial's MLflow run."""
    from ray import tune

    if os.environ.get("TUNE_ORIG_WORKING_DIR"):  # relative paths in the config mean what they mean for the job
        os.chdir(os.environ["TUNE_ORIG_WORKING_DIR"])
    trial_id = tune.get_context().get_trial_id()
    tracker = TrackedRun.start(study.tracking_uri, study.experiment, f"{study.study}-{trial_id}",
                               {STUDY_TAG: study.study, TRIAL_TAG: trial_id}, study.parent_run_id)
    tracker.log_params(config)
    own = {"output_dir": str(Path(tune.get_context().get_trial_dir()) / "evaluation"),
           "tracking.tracking_uri": study.tracking_uri, "tracking.run_id": tracker.run_id, "tracking.enabled": True}
    try:
        cfg = load_evaluation_config(base_evaluation, [*overrides, *param_overrides(config),
                                                       *(f"{key}={json.dumps(value)}" for key, value in own.items())])
        result = run_evaluation(cfg)
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish()
    tune.report({**result.metrics, RUN_ID_KEY: tracker.run_id})
