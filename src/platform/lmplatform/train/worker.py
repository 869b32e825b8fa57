"""The function every Ray Train worker runs."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from lmplatform.config.schema import RunConfig
from lmplatform.objectives.ewc_setup import attach_ewc
from lmplatform.objectives.registry import objective_spec
from lmplatform.train.loop import Trainer
from lmplatform.train.recipe import Batch, TrainingRecipe


def worker_threads(cfg: RunConfig) -> int:
    return cfg.scaling.torch_threads or max(1, math.ceil(cfg.scaling.cpus_per_worker))


def corpus_validator(cfg: RunConfig, recipe: TrainingRecipe, retrieval_set: Any) -> Optional[Callable[[Any], dict[str, float]]]:
    """The corpus-level retrieval validator of this run, when it configures one (the set is an object ref)."""
    if cfg.retrieval_validation is None or retrieval_set is None:
        return None
    import ray

    from lmplatform.evaluation.retrieval_validation import CorpusRetrievalValidator

    if recipe.retrieval_view is None:
        raise ValueError(f"objective {cfg.objective.name!r} cannot rank texts; remove retrieval_validation")
    return CorpusRetrievalValidator(ray.get(retrieval_set), cfg.retrieval_validation, recipe.retrieval_view)


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch

    from lmplatform.runtime import apply_runtime_defaults
    from lmplatform.tracking.mlflow_tracking import TrackedRun

    apply_runtime_defaults()
    cfg = RunConfig.model_validate(loop_config["config"])
    rank = ray.train.get_context().get_world_rank()
    # Ray sets OMP_NUM_THREADS to the CPUs reserved; torch needs to be told as well.
    torch.set_num_threads(worker_threads(cfg))
    torch.manual_seed(cfg.optim.seed)  # identical initialisation of new heads on every rank

    recipe = objective_spec(cfg.objective.name).build_recipe(cfg)
    ewc_report = attach_ewc(cfg, recipe, loop_config["tracking_uri"])  # before any restore: θ* is the start model
    device = ray.train.torch.get_device()
    tracker = TrackedRun(loop_config["tracking_uri"], loop_config["mlflow_run_id"]) if rank == 0 else None
    if ewc_report is not None and rank == 0:
        print(f"[lmp] {ewc_report.summary()}", flush=True)
        tracker.log_metrics(ewc_report.metrics(), step=0)
    trainer = Trainer(cfg, recipe, loop_config["total_steps"], device, rank, tracker,
                      corpus_validator=corpus_validator(cfg, recipe, loop_config.get("retrieval_set")))

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            trainer.restore(Path(folder))
    else:
        torch.manual_seed(cfg.optim.seed + 1000 * rank)  # different masks/negatives per rank

    train_shard = ray.train.get_dataset_shard("train")
    validation_shard = ray.train.get_dataset_shard("validation") if loop_config["has_validation"] else None
    batch_size = cfg.optim.batch_size

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        batches = train_shard.iter_batches(
            batch_size=batch_size,
            batch_format="numpy",
            local_shuffle_buffer_size=max(4 * batch_size, 256),
            local_shuffle_seed=cfg.optim.seed + 7919 * epoch + rank,
        )
        for index, batch in enumerate(batches):
            if index >= skip:  # resuming inside an epoch: skip what was already consumed
                yield recipe.collate(batch)

    def validation_batches() -> Iterator[Batch] | None:
        if validation_shard is None:
            return None
        return (recipe.collate(b) for b in validation_shard.iter_batches(batch_size=batch_size, batch_format="numpy"))

    trainer.fit(train_batches, validation_batches)
