"""Pipeline trials inside Tune: each trial runs a whole pipeline (`trial: pipeline`, `base_pipeline:`) with its values
(tune/kinds/pipeline.py checks the space and registers the winner).

- Parameters address stage fields by stage name (`stages.biencoder.run.optim.lr`), applied as pipeline overrides.
- Stage reuse is on: a stage whose resolved config and inputs match one that any trial already ran is taken
  from the cache (`pipeline/cache.py`), so e.g. mining with the same start model runs once per study.
- Reports: every report of a training stage reaches Tune (and ASHA) as `<stage>/<metric>` while it trains; a
  reused stage sends its recorded reports again, so the scheduler sees the same curve; the trial's last report
  holds every stage's final metrics.
- MLflow: the study's run, then one pipeline run per trial (tagged with the trial), then its stage runs.
- The pipeline run is named after the trial, so a trial run again after `Tuner.restore` continues its pipeline:
  finished stages are skipped and the interrupted one resumes from its checkpoint.
"""
from __future__ import annotations

import os
from typing import Any

from ray.tune.integration.ray_train import TuneReportCallback

from lmplatform.pipeline.config import load_pipeline_config
from lmplatform.pipeline.runner import run_pipeline
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG, trial_pipeline_name
from lmplatform.tune.space import param_overrides
from lmplatform.tune.trial_spec import StudyRun


def stage_metrics(stage: str, metrics: dict[str, Any]) -> dict[str, float]:
    """A stage's numeric metrics as the study sees them: `<stage>/<metric>`."""
    return {f"{stage}/{k}": float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and "/" not in str(k)}


class StageTuneReportCallback(TuneReportCallback):
    """Ray's TuneReportCallback, with each metric named after the stage it comes from."""

    def __init__(self, stage: str):
        super().__init__()
        self.stage = stage

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        super().after_report(run_context, [stage_metrics(self.stage, metrics[0])], None)


class TuneStageReporter:
    """Forwards a pipeline's reports to the Tune session of the trial that runs it."""

    def training_callbacks(self, stage: str) -> list[Any]:
        return [StageTuneReportCallback(stage)]

    def replay(self, stage: str, reports: list[dict[str, Any]]) -> None:
        from ray import tune

        for report in reports:
            tune.report(stage_metrics(stage, report))


def pipeline_trial(config: dict[str, Any], *, base_pipeline: str, overrides: list[str], study: StudyRun) -> None:
    """One pipeline trial; its last report carries every stage's metrics and its MLflow run id."""
    from ray import tune

    # Tune runs each trial in its own folder; the pipeline's relative paths mean what they mean for the job.
    if os.environ.get("TUNE_ORIG_WORKING_DIR"):
        os.chdir(os.environ["TUNE_ORIG_WORKING_DIR"])
    trial_id = tune.get_context().get_trial_id()
    base = load_pipeline_config(base_pipeline, overrides)
    # Only the study's winner is registered (after the gate), not every trial's models; no trial validates its
    # start model, which the study never reads.
    quiet = [f"stages.{stage.name}.{item}" for stage in base.stages for item in stage.spec.study_overrides]
    cfg = load_pipeline_config(base_pipeline, [
        *overrides, *param_overrides(config), *quiet, "reuse.enabled=true",
        f"tracking.tracking_uri={study.tracking_uri}", f"tracking.experiment={study.experiment}",
    ])
    result = run_pipeline(cfg, run_name=trial_pipeline_name(study.study, trial_id), parent_run_id=study.parent_run_id,
                          tags={STUDY_TAG: study.study, TRIAL_TAG: trial_id}, params=config, reporter=TuneStageReporter())
    final: dict[str, Any] = {}
    for name, record in result.state.stages.items():
        final |= stage_metrics(name, record.metrics)
    final["stages_reused"] = float(sum(1 for record in result.state.stages.values() if record.reused_from))
    tune.report({**final, RUN_ID_KEY: result.parent_run_id})
