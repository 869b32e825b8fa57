"""The function every Ray Train worker runs."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from lmplatform.data.rank_batches import rank_dataset_name
from lmplatform.evaluation.retrieval_validation import CorpusRetrievalValidator
from lmplatform.jobs.ingest import planned_epoch, shard_epoch
from lmplatform.objectives.run_config import RunConfig
from lmplatform.objectives.trainer import build_trainer
from lmplatform.ray_runtime import HelperPriority, quiet_train_reports
from lmplatform.runtime import apply_runtime_defaults
from lmplatform.tracking.mlflow_tracking import TrackedRun
from lmplatform.train.ingest import NumpyBatch, length_grouped, resume_batches
from lmplatform.train.recipe import Batch, TrainingRecipe


class RayTrainReporter:
    """`ray.train.report`: Ray Train persists the checkpoint folder to the run's storage."""

    def report(self, metrics: dict[str, float], checkpoint_dir: Optional[Path] = None,
               checkpoint_name: Optional[str] = None) -> None:
        import ray.train

        if checkpoint_dir is None:
            ray.train.report(metrics)
            return
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(checkpoint_dir)),
                         checkpoint_dir_name=checkpoint_name)


def worker_threads(cfg: RunConfig) -> int:
    return cfg.scaling.torch_threads or max(1, math.ceil(cfg.scaling.cpus_per_worker))


def corpus_validator(cfg: RunConfig, recipe: TrainingRecipe, retrieval_set: Any) -> Optional[Callable[[Any], dict[str, float]]]:
    """The corpus-level retrieval validator of this run, when it configures one (the set is an object ref)."""
    if cfg.retrieval_validation is None or retrieval_set is None:
        return None
    import ray

    if recipe.retrieval_view is None:
        raise ValueError(f"objective {cfg.objective.name!r} cannot rank texts; remove retrieval_validation")
    return CorpusRetrievalValidator(ray.get(retrieval_set), cfg.retrieval_validation, recipe.retrieval_view)


def train_batch_source(cfg: RunConfig, rank: int, planned: bool,
                       collate: Callable[[NumpyBatch], Batch]) -> Callable[[int, int], Iterator[Batch]]:
    """This rank's `train_batches(epoch, skip)`, from its dataset shard (inside a Ray Train worker).

    The shards come in a fixed order (train_run.py passes ingest_config()), so skipping the checkpoint's
    count of batches resumes at the same batch (`data.length_grouping` regroups that fixed order, so it
    stays fixed). Planned batches (`PreparedData.planned_batches`) come
    whole, in plan order, from the rank's own dataset.
    """
    import ray.train

    shard = ray.train.get_dataset_shard(rank_dataset_name(rank) if planned else "train")

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        if planned:
            return resume_batches(planned_epoch(shard, epoch), collate, skip)
        batches = shard_epoch(shard, cfg.optim.batch_size, cfg.optim.seed, epoch, rank)
        grouping = cfg.data.length_grouping
        if grouping is not None:
            batches = length_grouped(batches, cfg.optim.batch_size, grouping.buffer_batches, cfg.optim.seed, epoch, rank)
        return resume_batches(batches, collate, skip)

    return train_batches


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch

    apply_runtime_defaults()
    quiet_train_reports()
    cfg = RunConfig.model_validate(loop_config["config"])
    rank = ray.train.get_context().get_world_rank()
    # Ray sets OMP_NUM_THREADS to the CPUs reserved; torch needs to be told as well.
    torch.set_num_threads(worker_threads(cfg))
    tracker = TrackedRun(loop_config["tracking_uri"], loop_config["mlflow_run_id"]) if rank == 0 else None
    retrieval_set = loop_config.get("retrieval_set")
    trainer = build_trainer(cfg, loop_config["total_steps"], ray.train.torch.get_device(), rank, tracker,
                            loop_config["tracking_uri"], reporter=RayTrainReporter(),
                            corpus_validator=lambda recipe: corpus_validator(cfg, recipe, retrieval_set))
    recipe = trainer.recipe

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            trainer.begin(Path(folder))
    else:
        trainer.begin(None)

    train_batches = train_batch_source(cfg, rank, loop_config["planned_batches"], recipe.collate)
    validation_shard = ray.train.get_dataset_shard("validation") if loop_config["has_validation"] else None
    batch_size = cfg.optim.batch_size

    def validation_batches() -> Iterator[Batch] | None:
        if validation_shard is None:
            return None
        return (recipe.collate(b) for b in validation_shard.iter_batches(batch_size=batch_size, batch_format="numpy"))

    helpers = HelperPriority()
    try:
        trainer.fit(train_batches, validation_batches)
    finally:
        helpers.stop()
