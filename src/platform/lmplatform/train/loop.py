"""The Ray Train worker loop shared by every objective.

It knows the recipe interface only: a model, an objective returning (loss,
metrics), a collate function, regularizers, an evaluator and an exporter.
Forward passes run under the autocast of `optim.precision` (train/precision.py).
Ray Train is reached through a `Reporter` only, so the loop also runs in one
process without Ray (`FolderReporter`: tests of exact resume, debugging).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol

import torch

from lmplatform.config.schema import RunConfig
from lmplatform.models.gradient_checkpointing import enable_gradient_checkpointing
from lmplatform.train import distributed as D
from lmplatform.train.optim import build_optimizer, build_scheduler
from lmplatform.train.precision import MixedPrecision
from lmplatform.train.recipe import Batch, TrainingRecipe
from lmplatform.train.state import FINAL_MODEL_DIR, Progress, load_checkpoint, save_checkpoint, seed_everything

logger = logging.getLogger(__name__)


def format_eta(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


class StepTimer:
    """Throughput over the logging window and an ETA from the mean step time of this attempt."""

    def __init__(self, start_step: int):
        self.start_step = start_step
        self.start = self.window_start = time.perf_counter()
        self.tokens = self.samples = 0

    def add(self, tokens: int, samples: int) -> None:
        self.tokens += tokens
        self.samples += samples

    def window(self, step: int, total_steps: int) -> dict[str, float]:
        now = time.perf_counter()
        elapsed = max(now - self.window_start, 1e-9)
        done = step - self.start_step
        per_step = (now - self.start) / done if done else float("nan")
        out = {
            "tokens_per_s": self.tokens / elapsed,
            "samples_per_s": self.samples / elapsed,
            "eta_s": per_step * (total_steps - step),
        }
        self.window_start, self.tokens, self.samples = now, 0, 0
        return out


def place(batch: Batch, device: torch.device) -> Batch:
    """The batch's tensors on `device`: the one place batches move, for training and validation alike."""
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


@contextlib.contextmanager
def evaluation_mode(*modules: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd inside the block; each module's mode is restored after."""
    was_training = [module.training for module in modules]
    for module in modules:
        module.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, mode in zip(modules, was_training):
            module.train(mode)


class Reporter(Protocol):
    """Where the loop's results and checkpoints go."""

    def report(self, metrics: dict[str, float], checkpoint_dir: Optional[Path] = None,
               checkpoint_name: Optional[str] = None) -> None: ...


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


class FolderReporter:
    """Keeps every report in memory and copies each checkpoint to `root/<name>`: the loop in one process."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.reports: list[dict[str, float]] = []
        self.checkpoints: list[Path] = []

    def report(self, metrics: dict[str, float], checkpoint_dir: Optional[Path] = None,
               checkpoint_name: Optional[str] = None) -> None:
        self.reports.append(dict(metrics))
        if checkpoint_dir is not None:
            target = self.root / (checkpoint_name or f"checkpoint_{len(self.checkpoints):06d}")
            shutil.copytree(checkpoint_dir, target, dirs_exist_ok=True)
            self.checkpoints.append(target)


class Trainer:
    """One worker's view of a run."""

    def __init__(self, cfg: RunConfig, recipe: TrainingRecipe, total_steps: int, device: torch.device, rank: int,
                 tracker: Any = None, corpus_validator: Optional[Callable[[torch.nn.Module], dict[str, float]]] = None,
                 reporter: Optional[Reporter] = None):
        self.cfg = cfg
        self.reporter: Reporter = reporter if reporter is not None else RayTrainReporter()
        self.corpus_validator = corpus_validator
        self.recipe = recipe
        self.total_steps = total_steps
        self.device = device
        self.rank = rank
        self.tracker = tracker
        self.precision = MixedPrecision(cfg.optim.precision, device)  # refuses fp16 without CUDA, before any work
        self.model = recipe.model.to(device)
        if cfg.model.gradient_checkpointing:
            enable_gradient_checkpointing(self.model)
        self.objective = recipe.objective.to(device)
        for regularizer in recipe.regularizers:
            regularizer.to(device)
        D.broadcast_parameters(self.model)
        D.broadcast_parameters(self.objective)
        self.params = recipe.parameters()
        names = {id(p): n for module in (self.model, self.objective) for n, p in module.named_parameters()}
        self.optimizer = build_optimizer(self.params, names, cfg.optim, recipe.learning_rates)
        # Parameters with an allowed set (log τ within its bounds) are projected back after each step,
        # as CLIP clamps its logit scale: Adam's momentum would otherwise carry them past the bound,
        # where they sit unused until the gradient has walked them back.
        self.projected = [m for root in (self.model, self.objective) for m in root.modules()
                          if callable(getattr(m, "project_", None))]
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, total_steps)
        self.progress = Progress()
        # The newest validation metrics ride along with every report, so a Tune
        # scheduler (ASHA) sees its metric in each intermediate result.
        self.latest_validation: dict[str, float] = {}

    # -- checkpoints -------------------------------------------------------
    def begin(self, checkpoint: Optional[Path] = None) -> None:
        """Restore `checkpoint`, or seed this rank's generators for a fresh start (other masks and
        dropout per rank). Call before `fit`, in the process that trains."""
        if checkpoint is not None:
            self.restore(checkpoint)
        else:
            seed_everything(self.cfg.optim.seed + 1000 * self.rank)

    def restore(self, folder: Path) -> None:
        self.progress = load_checkpoint(folder, self.rank, self.model, self.objective, self.optimizer, self.scheduler,
                                        self.recipe.stateful_parts(), self.device, self.precision.scaler)
        self._log({"resumed_from_step": float(self.progress.step)}, self.progress.step)
        self._print(f"resumed from checkpoint at step {self.progress.step} (epoch {self.progress.epoch})")

    def _report(self, metrics: dict[str, float], with_checkpoint: bool, final: bool = False) -> None:
        metrics = {**self.latest_validation, **metrics, "step": self.progress.step, "epoch": self.progress.epoch}
        if not with_checkpoint:
            self.reporter.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="lmp-ckpt-") as tmp:
            folder = Path(tmp)
            save_checkpoint(folder, self.rank, self.progress, self.model, self.objective, self.optimizer, self.scheduler,
                            self.recipe.stateful_parts(), self.device, self.precision.scaler)
            if final and self.rank == 0:
                self.recipe.export(self.model, folder / FINAL_MODEL_DIR)
            self.reporter.report(metrics, folder,
                                 f"checkpoint_step{self.progress.step:08d}" + ("_final" if final else ""))

    # -- evaluation --------------------------------------------------------
    def evaluate(self, batches: Optional[Iterable[Batch]]) -> dict[str, float]:
        """In-batch validation on the validation shards, then corpus-level retrieval validation if configured.

        The evaluator gets batches already on the device, with model and objective in eval mode under
        inference mode and the run's autocast: evaluators only compute metrics. Batches are moved lazily,
        one at a time, inside the evaluator's own context (DeCLUTR collates validation batches from fixed
        spans there).
        """
        metrics: dict[str, float] = {}
        if self.recipe.evaluate is not None and batches is not None:
            with evaluation_mode(self.model, self.objective), self.precision.autocast():
                sums = self.recipe.evaluate(self.model, (place(batch, self.device) for batch in batches), self.rank)
            metrics = self.recipe.summarize(D.reduce_weighted(sums, self.device))
        if self.corpus_validator is not None:
            metrics |= self.corpus_validator(self.model)
        if not metrics:
            return {}
        self.latest_validation = {f"val_{k}": v for k, v in metrics.items()}
        return dict(self.latest_validation)

    # -- training ----------------------------------------------------------
    def _loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        with self.precision.autocast():
            loss, metrics = self.objective(self.model, batch)
            for regularizer in self.recipe.regularizers:
                extra, extra_metrics = regularizer(self.model)
                loss = loss + extra
                metrics = {**metrics, **extra_metrics}
        return loss, {"loss": float(loss.detach()), **metrics}

    def _optimizer_step(self) -> float:
        D.all_reduce_gradients(self.params)
        self.precision.unscale_(self.optimizer)
        norm = float("nan")
        if self.cfg.optim.max_grad_norm:
            norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.optim.max_grad_norm))
        if self.precision.step(self.optimizer):
            with torch.no_grad():
                for module in self.projected:
                    module.project_()
            # A step fp16 skipped (its gradients overflowed) leaves the schedule where it was, as in
            # Hugging Face's Trainer: the learning rates follow the updates actually made.
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.progress.step += 1
        return norm

    def _micro_batches(self, train_batches: Any) -> Iterator[Batch]:
        """Training micro-batches on the device, epoch after epoch, from the checkpointed position on.

        A batch counts as consumed (`progress.batches_in_epoch`) when it is handed out, so a checkpoint
        taken after its optimizer step records it; an exhausted epoch moves `progress.epoch` on.
        """
        progress = self.progress
        while True:
            handed_out = 0
            for batch in D.while_all_have_batches(train_batches(progress.epoch, progress.batches_in_epoch), self.device):
                progress.batches_in_epoch += 1
                handed_out += 1
                yield place(batch, self.device)
            if handed_out == 0 and progress.batches_in_epoch == 0:
                raise RuntimeError("the training dataset produced no batches; check data and batch_size")
            progress.epoch += 1
            progress.batches_in_epoch = 0

    def fit(self, train_batches: Any, validation_batches: Any) -> dict[str, float]:
        """Train to total_steps; `train_batches(epoch, skip)` and `validation_batches()` return fresh
        iterators of collated batches. One optimizer step takes `grad_accum_steps` micro-batches."""
        cfg, progress = self.cfg, self.progress
        accum = cfg.optim.grad_accum_steps
        ckpt_every, log_every = cfg.checkpoint.every_n_steps, cfg.tracking.log_every_n_steps
        eval_every = cfg.tracking.eval_every_n_steps
        if progress.step == 0:
            progress.initial_metrics = initial = self.evaluate(validation_batches())
            if initial:
                self._log({f"{k}_initial": v for k, v in initial.items()} | initial, step=0)
                self._print("before training: " + _fmt(initial))
        timer = StepTimer(progress.step)
        window: dict[str, list[float]] = {}
        self.model.train()
        batches = self._micro_batches(train_batches)
        while progress.step < self.total_steps:
            for batch in itertools.islice(batches, accum):
                loss, metrics = self._loss(batch)
                self.precision.scale(loss / accum).backward()
                tokens = self.recipe.count_tokens(batch)
                samples = int(next(iter(batch.values())).shape[0])
                timer.add(tokens, samples)
                progress.tokens += tokens
                progress.samples += samples
                for key, value in metrics.items():
                    window.setdefault(key, []).append(value)
            grad_norm = self._optimizer_step()
            step = progress.step
            done = step >= self.total_steps
            if step % log_every == 0 or done:
                self._log_window(window, timer, grad_norm)
            if eval_every and step % eval_every == 0 and not done:
                val = self.evaluate(validation_batches())
                self._log(val, step)
                self._print(f"step {step}: " + _fmt(val))
                # Every worker evaluates at the same steps, so each calls report equally often.
                self._report({"loss": metrics["loss"]}, with_checkpoint=False)
                self.model.train()
            if step % ckpt_every == 0 and not done:
                self._report({"loss": metrics["loss"]}, with_checkpoint=True)
        final = self.evaluate(validation_batches())
        self._log(final, progress.step)
        if final:
            self._print("after training: " + _fmt(final))
        initial = progress.initial_metrics
        tokens = D.sum_over_workers(float(progress.tokens), self.device)
        summary = {**{f"{k}_initial": v for k, v in initial.items()}, **final, "tokens": tokens}
        self._report(summary, with_checkpoint=True, final=True)
        return summary

    def _log_window(self, window: dict[str, list[float]], timer: StepTimer, grad_norm: float) -> None:
        """Mean of the window's micro-batch metrics over workers, with lr, grad norm and throughput: logged and printed."""
        step = self.progress.step
        logged = D.mean_over_workers({k: sum(v) / len(v) for k, v in window.items()}, self.device)
        speed = timer.window(step, self.total_steps)
        world = D.world_size()
        logged |= {
            "lr": self.scheduler.get_last_lr()[0],
            "grad_norm": grad_norm,
            "tokens_per_s": speed["tokens_per_s"] * world,
            "samples_per_s": speed["samples_per_s"] * world,
        }
        window.clear()
        self._log(logged, step)
        self._print(
            f"step {step}/{self.total_steps} epoch {self.progress.epoch} loss {logged['loss']:.4f} "
            f"lr {logged['lr']:.2e} tokens/s {logged['tokens_per_s']:.0f} "
            f"samples/s {logged['samples_per_s']:.1f} ETA {format_eta(speed['eta_s'])}"
        )

    def _log(self, metrics: dict[str, float], step: int) -> None:
        if self.tracker is not None and self.rank == 0 and metrics:
            self.tracker.log_metrics(metrics, step=step)

    def _print(self, message: str) -> None:
        # Ray Train patches print() in workers and, once a library (MLflow) has
        # wrapped sys.stdout, tees every line twice; the raw stream prints it once.
        if self.rank == 0:
            print(f"[lmp] {message}", file=sys.__stdout__, flush=True)


def _fmt(metrics: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
