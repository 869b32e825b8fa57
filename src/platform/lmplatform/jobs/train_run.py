"""The driver side of a training run: validate, read data, launch Ray Train, track in MLflow."""
from __future__ import annotations

import logging
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lmplatform.evaluation.retrieval_validation import prepare_retrieval_set
from lmplatform.jobs.ingest import ingest_config
from lmplatform.jobs.train_worker import train_loop_per_worker
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.ewc_setup import check_fisher_anchor, prepare_ewc
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import RunConfig
from lmplatform.ray_runtime import ensure_ray
from lmplatform.runtime import project_root, resolve_storage_path, resolve_tracking_uri, worker_env_vars
from lmplatform.tracking.exports import export_and_log
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten, git_commit
from lmplatform.tracking.registry import register_model_version
from lmplatform.tracking.version_tags import OBJECTIVE_TAG, RUN_OBJECTIVE_TAG
from lmplatform.train.optim import total_optimizer_steps
from lmplatform.train.recipe import PreparedData
from lmplatform.train.state import FINAL_MODEL_DIR

logger = logging.getLogger(__name__)
RUN_TAG = "lmp.train_run"


@dataclass
class TrainingResult:
    run_name: str
    mlflow_run_id: str
    tracking_uri: str
    model_dir: Path
    model_artifact_uri: str
    registered_model: Optional[str]
    model_version: Optional[str]
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint_path: Optional[str] = None


def with_absolute_paths(cfg: RunConfig) -> RunConfig:
    """A copy whose local model path is absolute (URIs and 'default' are kept)."""
    local = Path(cfg.model.name_or_path).expanduser()
    if "://" in cfg.model.name_or_path or not local.exists():
        return cfg
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"name_or_path": str(local.resolve())})})


def new_run_name(cfg: RunConfig) -> str:
    # Ray 2.60 silently resumes a run whose name already exists, so names are unique.
    return f"{cfg.objective.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _find_tracked_run(tracking_uri: str, experiment: str, run_name: str) -> Optional[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{RUN_TAG}` = '{run_name}'", max_results=1)
    return runs[0].info.run_id if runs else None


def run_training(
    cfg: RunConfig,
    resume: Optional[str] = None,
    parent_run_id: Optional[str] = None,
    extra_tags: Optional[dict[str, str]] = None,
    callbacks: Optional[list[Any]] = None,
    run_name: Optional[str] = None,
) -> TrainingResult:
    """Run one training job end to end. Raises before any worker starts if config, model or data are bad.

    `run_name` names a new run (a caller that must record the name before training starts,
    such as a pipeline stage, picks it with `new_run_name`); `resume` continues an existing one.
    """
    cfg, storage = _preflight(cfg, resume)
    ensure_ray()
    data = _prepare_data(cfg)
    total_steps = total_optimizer_steps(cfg.optim, data.train_examples, cfg.scaling.num_workers)
    run_name = resume or run_name or new_run_name(cfg)
    tracker = _open_tracked_run(cfg, data, run_name, bool(resume), total_steps, parent_run_id, extra_tags)
    if cfg.ewc is not None:
        cfg = prepare_ewc(cfg, tracker, _local_model_dir(storage, run_name).parent)
    print(f"[lmp] run {run_name}: {total_steps} steps on {cfg.scaling.num_workers} worker(s); "
          f"MLflow run {tracker.run_id} at {tracker.tracking_uri}", flush=True)
    trainer = _torch_trainer(cfg, data, run_name, storage, tracker, total_steps, callbacks)
    try:
        result = trainer.fit()
    except BaseException:
        tracker.finish("FAILED")
        print(f"[lmp] run {run_name} failed; continue it with --resume {run_name}", flush=True)
        raise
    if result.checkpoint is None:
        tracker.finish("FAILED")
        raise RuntimeError(f"run {run_name} finished without a final checkpoint")
    return _publish(cfg, result, _local_model_dir(storage, run_name), run_name, tracker)


def _preflight(cfg: RunConfig, resume: Optional[str]) -> tuple[RunConfig, str]:
    """What every worker would refuse, refused here first: the config, the model, an EWC anchor, the run to resume.
    Returns the config with absolute paths (workers run in their own working directories) and the storage path."""
    RunConfig.model_validate(cfg.model_dump(mode="json"))
    resolve_model_path(cfg.model.name_or_path)
    if cfg.ewc is not None:
        check_fisher_anchor(cfg)  # a Fisher through a random MLM head is refused before Ray or MLflow start
    cfg = with_absolute_paths(cfg)
    storage = resolve_storage_path(cfg.checkpoint.storage_path)
    if resume and "://" not in storage and not (Path(storage) / resume).is_dir():
        known = sorted(p.name for p in Path(storage).iterdir() if p.is_dir()) if Path(storage).is_dir() else []
        raise FileNotFoundError(
            f"--resume {resume}: no run of that name under {storage}"
            + (f"; runs there: {', '.join(known[-10:])}" if known else "")
        )
    return cfg, storage


def _prepare_data(cfg: RunConfig) -> PreparedData:
    """The objective's datasets (`ObjectiveSpec.prepare_data`) and, if asked for, the retrieval validation set."""
    data = objective_spec(cfg.objective.name).prepare_data(cfg)
    print(f"[lmp] {data.summary}", flush=True)
    data.retrieval_set = prepare_retrieval_set(cfg)
    if data.retrieval_set is not None:
        print(f"[lmp] {data.retrieval_set.summary()}", flush=True)
        data.metrics |= {f"data/ir_{k}": float(v) for k, v in data.retrieval_set.counts.items()}
    return data


def _open_tracked_run(cfg: RunConfig, data: PreparedData, run_name: str, resuming: bool, total_steps: int,
                      parent_run_id: Optional[str], extra_tags: Optional[dict[str, str]]) -> TrackedRun:
    """The run's MLflow run: the one `run_name` already has when resuming, else a new one with its tags, params and
    the data's report."""
    tracking_uri = resolve_tracking_uri(cfg.tracking.tracking_uri)
    mlflow_run_id = _find_tracked_run(tracking_uri, cfg.tracking.experiment, run_name) if resuming else None

    def new_run_tags() -> dict[str, str]:
        return {
            RUN_TAG: run_name,
            RUN_OBJECTIVE_TAG: cfg.objective.name,
            "lmp.git_commit": git_commit(),
            "lmp.data_fingerprint": data.fingerprint,
            **({"lmp.retrieval_validation_fingerprint": data.retrieval_set.fingerprint()} if data.retrieval_set else {}),
            "lmp.model_source": cfg.model.name_or_path,
            **(extra_tags or {}),
        }

    tracker, new_run = TrackedRun.start_or_resume(tracking_uri, cfg.tracking.experiment, cfg.tracking.run_name or run_name,
                                                  mlflow_run_id, new_run_tags, parent_run_id)
    if new_run:
        tracker.log_params(flatten(cfg.model_dump(mode="json")) | {"total_steps": total_steps})
        tracker.log_metrics(data.metrics, step=0)
        tracker.log_dict(data.report, "data_report.json")
    return tracker


def _torch_trainer(cfg: RunConfig, data: PreparedData, run_name: str, storage: str, tracker: TrackedRun, total_steps: int,
                   callbacks: Optional[list[Any]]) -> Any:
    """The Ray Train `TorchTrainer` of the run: its workers, datasets, checkpoints and failure policy."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, ScalingConfig
    from ray.train import RunConfig as RayRunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    resources = {"CPU": cfg.scaling.cpus_per_worker, **cfg.scaling.resources_per_worker}
    if cfg.scaling.use_gpu:
        resources["GPU"] = cfg.scaling.gpus_per_worker
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config={
            "config": cfg.model_dump(mode="json"),
            "total_steps": total_steps,
            "tracking_uri": tracker.tracking_uri,
            "mlflow_run_id": tracker.run_id,
            "has_validation": "validation" in data.datasets,
            "planned_batches": data.planned_batches,
            "retrieval_set": ray.put(data.retrieval_set) if data.retrieval_set is not None else None,
        },
        scaling_config=ScalingConfig(num_workers=cfg.scaling.num_workers, use_gpu=cfg.scaling.use_gpu,
                                     resources_per_worker=resources, placement_strategy=cfg.scaling.placement_strategy),
        torch_config=TorchConfig(backend="nccl" if cfg.scaling.use_gpu else "gloo"),
        datasets=data.datasets,
        dataset_config=ingest_config(),  # a fixed batch order, so a mid-epoch resume continues the same run
        run_config=RayRunConfig(
            name=run_name,
            storage_path=storage,
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.checkpoint.keep),
            failure_config=FailureConfig(max_failures=cfg.checkpoint.max_failures),
            worker_runtime_env={"env_vars": worker_env_vars()},
            callbacks=callbacks,
            # Ray Train's INFO lines (resources requested, worker group started, process group, every
            # report and checkpoint: ~8 per run) stay in its log files; the console keeps our own lines.
            logging_config=LoggingConfig(log_level="WARNING"),
        ),
    )


def _publish(cfg: RunConfig, result: Any, model_dir: Path, run_name: str, tracker: TrackedRun) -> TrainingResult:
    """The final checkpoint's model copied to `model_dir`, logged (with its exports) and registered; the run closed."""
    with result.checkpoint.as_directory() as folder:
        if model_dir.exists():
            shutil.rmtree(model_dir)
        shutil.copytree(Path(folder) / FINAL_MODEL_DIR, model_dir)
    artifact_uri = tracker.log_artifacts(model_dir, "model")
    if cfg.tracking.exports:
        logged = export_and_log(tracker.tracking_uri, tracker.run_id, model_dir, cfg.tracking.exports)
        print(f"[lmp] exports logged beside model/: {', '.join(u.rsplit('/', 1)[-1] for u in logged.values())}", flush=True)
    version = None
    registered = cfg.registered_model_name() if cfg.tracking.register_model else None
    if registered:
        version = register_model_version(tracker.tracking_uri, registered, artifact_uri, tracker.run_id,
                                         tags={OBJECTIVE_TAG: cfg.objective.name, "train_run": run_name})
        tracker.set_tags({"lmp.registered_model": registered, "lmp.model_version": version})
    tracker.finish()
    print(f"[lmp] model saved to {model_dir}" + (f"; registered {registered} version {version}" if registered else ""),
          flush=True)
    return TrainingResult(
        run_name=run_name, mlflow_run_id=tracker.run_id, tracking_uri=tracker.tracking_uri, model_dir=model_dir,
        model_artifact_uri=artifact_uri, registered_model=registered, model_version=version,
        metrics={k: float(v) for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))},
        checkpoint_path=result.checkpoint.path,
    )


def _local_model_dir(storage: str, run_name: str) -> Path:
    if "://" in storage:
        return project_root() / "outputs" / run_name / "model"
    return Path(storage) / run_name / "model"
