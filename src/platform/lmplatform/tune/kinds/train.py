"""Train trials (`trial: train`, `base_config:`): each trial is one distributed training run of the base run config
with its values. In Ray 2.60 (Train V2) a Tuner cannot wrap a TorchTrainer, so each trial is a small driver
function that calls `run_training` (which fits a TorchTrainer) with `TuneReportCallback`: the workers' reports reach
Tune and ASHA. The best trial's model is registered and may become champion (tune/champion.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from lmplatform.objectives.registry import objective_names
from lmplatform.objectives.run_config import RunConfig, load_run_config, reported_metrics
from lmplatform.runtime import resolve_storage_path, resolve_tracking_uri
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten
from lmplatform.tune.champion import ChampionDecision, GateInputs, evaluation_fingerprint, register_and_maybe_promote
from lmplatform.tune.gate import check_held_out
from lmplatform.tune.metrics import is_corpus_metric
from lmplatform.tune.results import RUN_ID_KEY, STUDY_TAG, TRIAL_TAG, winner_tags
from lmplatform.tune.space import (
    LoadedSpace,
    SpaceError,
    SpaceLines,
    check_champion,
    check_values,
    gate_metric,
    load_base,
    param_overrides,
    resolve_project_path,
    target_keys,
    where,
)
from lmplatform.tune.trial_spec import StudyRun


def check(loaded: LoadedSpace, lines: SpaceLines) -> RunConfig:
    space, source = loaded.space, loaded.path
    missing = [name for name in space.requires if name not in objective_names()]
    if missing:
        raise SpaceError(
            f"{where(source, lines, ('requires',))}: this study needs objective(s) {', '.join(missing)}, "
            f"which this installation does not have; available objectives: {', '.join(sorted(objective_names()))}"
        )
    base, with_override = load_base(loaded, lines, "the base run config", load_run_config)
    known = flatten(base.model_dump(mode="json"))
    for name, param in space.parameters.items():
        check_values(loaded, lines, name, param, f"the base run config {space.base_config}", with_override)
        for cond in param.when:
            if cond not in known and cond not in space.parameters:
                raise SpaceError(f"{where(source, lines, ('parameters', name, 'when', cond))}: condition on {cond!r}, "
                                 "which is neither a searched parameter nor a field of the base run config")
    allowed = reported_metrics(base)
    for key, metric in target_keys(space):
        if metric not in allowed:
            raise SpaceError(
                f"{where(source, lines, key)}: metric {metric!r} is never reported by a "
                f"{base.objective.name!r} trial; it reports: {', '.join(sorted(allowed))}"
                + (" (val_ir_* metrics need a retrieval_validation section in the base config)"
                   if is_corpus_metric(metric) else "")
            )
    check_champion(loaded, lines)
    return base


def before_study(loaded: LoadedSpace) -> None:
    if loaded.space.champion.register_best:
        check_held_out(loaded.space.champion, loaded.base)


def tracking(loaded: LoadedSpace) -> Any:
    return loaded.base.tracking


def trainable(loaded: LoadedSpace, study: StudyRun) -> Callable[..., Any]:
    from ray import tune

    return tune.with_parameters(train_trial, base_config=str(loaded.base_path), overrides=trial_base_overrides(loaded),
                                study=study)


def trial_config(loaded: LoadedSpace, params: dict[str, Any]) -> RunConfig:
    """The run config a trial with these values trains."""
    return load_run_config(loaded.base_path, loaded.trial_overrides(params))


def trial_base_overrides(loaded: LoadedSpace) -> list[str]:
    """The space's overrides plus absolute paths: trial processes run in their own working directories."""
    cfg: RunConfig = loaded.base
    absolute = [
        f"data.train_paths={json.dumps([str(resolve_project_path(p)) for p in cfg.data.train_paths])}",
        f"data.validation_paths={json.dumps([str(resolve_project_path(p)) for p in cfg.data.validation_paths])}",
        f"checkpoint.storage_path={resolve_storage_path(cfg.checkpoint.storage_path)}",
        f"tracking.tracking_uri={resolve_tracking_uri(cfg.tracking.tracking_uri)}",
    ]
    local_model = resolve_project_path(cfg.model.name_or_path)
    if "://" not in cfg.model.name_or_path and local_model.exists():
        absolute.append(f"model.name_or_path={local_model}")
    rv = cfg.retrieval_validation
    if rv is not None and rv.pairs is not None:
        for key in ("train_paths", "validation_paths"):
            paths = [str(resolve_project_path(p)) for p in getattr(rv.pairs, key)]
            absolute.append(f"retrieval_validation.pairs.{key}={json.dumps(paths)}")
    if rv is not None and rv.distractors is not None:
        paths = [str(resolve_project_path(p)) for p in rv.distractors.paths]
        absolute.append(f"retrieval_validation.distractors.paths={json.dumps(paths)}")
    if (rv is not None and "://" not in rv.first_stage and rv.first_stage != "bm25"
            and resolve_project_path(rv.first_stage).exists()):
        absolute.append(f"retrieval_validation.first_stage={resolve_project_path(rv.first_stage)}")
    return [*loaded.base_overrides, *absolute]


def train_trial(config: dict[str, Any], *, base_config: str, overrides: list[str], study: StudyRun) -> None:
    """One train trial: a distributed training run whose worker reports reach Tune through TuneReportCallback."""
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from lmplatform.jobs.train_run import run_training

    trial_id = tune.get_context().get_trial_id()
    cfg = load_run_config(base_config, [*overrides, *param_overrides(config), "tracking.register_model=false"])
    run_name, resume = trial_run(cfg.checkpoint.storage_path, study.study, trial_id)
    if resume:
        print(f"[lmp] trial {trial_id}: continuing its training run {run_name} from its last checkpoint", flush=True)
    result = run_training(
        cfg, resume=resume, run_name=run_name, parent_run_id=study.parent_run_id,
        extra_tags={STUDY_TAG: study.study, TRIAL_TAG: trial_id}, callbacks=[TuneReportCallback()],
    )

    child = TrackedRun(result.tracking_uri, result.mlflow_run_id)
    child.set_tags({"lmp.checkpoint_path": result.checkpoint_path or "", "lmp.model_artifact_uri": result.model_artifact_uri})
    # The data report (documents kept, bad rows, e.g. what a DeCLUTR span length drops) joins the
    # last result, with the MLflow run id so the study can find the trial's model.
    data_metrics = {k: v for k, v in child.client.get_run(child.run_id).data.metrics.items() if k.startswith("data/")}
    tune.report({**result.metrics, **data_metrics, RUN_ID_KEY: result.mlflow_run_id})


def trial_run(storage_path: str, study: str, trial_id: str) -> tuple[str, Optional[str]]:
    """(Ray Train run name, the same name when that run exists and must be continued, else None).

    The name is fixed per trial, so a trial that a restored study (`--resume`) runs again picks
    up its training run at the last checkpoint instead of starting over.
    """
    name = f"{study}.{trial_id}"
    storage = resolve_storage_path(storage_path)
    exists = "://" not in storage and (Path(storage) / name).is_dir()
    return name, name if exists else None


def champion(loaded: LoadedSpace, best: dict[str, Any], tracking_uri: str, study_name: str) -> ChampionDecision:
    from mlflow.tracking import MlflowClient

    space = loaded.space
    run = MlflowClient(tracking_uri).get_run(best["mlflow_run_id"])
    cfg = trial_config(loaded, best["params"])
    fingerprint = evaluation_fingerprint(cfg, run.data.tags.get("lmp.data_fingerprint", ""), space.metric,
                                         run.data.tags.get("lmp.retrieval_validation_fingerprint", ""))
    name = space.champion.registered_model or cfg.registered_model_name()
    val_metrics = {k: v for k, v in best["metrics"].items() if k.startswith("val_")}
    gate = None
    if space.champion.confirm is not None:
        gate = GateInputs(space.champion, gate_metric(space), cfg.objective.name, cfg.model.name_or_path)
    return register_and_maybe_promote(
        tracking_uri, name, best["mlflow_run_id"], "model", space.metric, space.mode,
        best["metrics"][space.metric], fingerprint, val_metrics,
        tags=winner_tags(study_name, best, cfg.objective.name),
        alias=space.champion.alias, gate=gate,
    )
