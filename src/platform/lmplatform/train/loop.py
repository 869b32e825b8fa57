"""The Ray Train worker loop shared by every objective.

It knows the recipe interface only: a model, an objective returning (loss,
metrics), a collate function, regularizers, an evaluator and an exporter.
Forward passes run under the autocast of `optim.precision` (train/precision.py).
Ray Train is reached through a `Reporter` only, so the loop also runs in one
process without Ray (`FolderReporter`: tests of exact resume, debugging).

A micro-step never waits for the device: batches are counted on the host before they move
(train/feed.py), and the loss, the objective's metrics and the gradient norm stay device tensors
until a logging, validation or checkpoint step reads them. Reading a GPU value (`float(loss)`)
stalls the host until every queued kernel ran, so the host could not queue the next step meanwhile.
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
from typing import Any, Callable, ContextManager, Iterable, Iterator, Optional, Protocol

import torch

from lmplatform.config.schema import CheckpointConfig, DataConfig, ModelConfig, OptimConfig, TrackingConfig
from lmplatform.models.gradient_checkpointing import enable_gradient_checkpointing
from lmplatform.train import distributed as D
from lmplatform.train.early_stopping import plateaued
from lmplatform.train.feed import FedBatch, Feeder, Prefetcher, place
from lmplatform.train.optim import build_optimizer, build_scheduler
from lmplatform.train.precision import MixedPrecision
from lmplatform.train.recipe import Batch, TrainingRecipe
from lmplatform.train.state import (
    FINAL_MODEL_DIR,
    Progress,
    load_checkpoint,
    save_checkpoint,
    seed_everything,
)

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



Metric = float | torch.Tensor


class MetricWindow:
    """The micro-batches' metrics summed over a logging window, where they are: 0-dim device tensors stay
    on the device (summed in float64, as Python sums floats), Python floats stay floats. `means()`
    reads them, at logging time only."""

    def __init__(self) -> None:
        self.sums: dict[str, Metric] = {}
        self.counts: dict[str, int] = {}
        self.real_tokens = self.token_slots = 0  # over attention masks, counted on the host

    def add(self, metrics: dict[str, Metric]) -> None:
        for key, value in metrics.items():
            value = value.detach().to(torch.float64) if torch.is_tensor(value) else float(value)
            self.sums[key] = self.sums[key] + value if key in self.sums else value
            self.counts[key] = self.counts.get(key, 0) + 1

    def add_padding(self, real_tokens: int, token_slots: int) -> None:
        self.real_tokens += real_tokens
        self.token_slots += token_slots

    def means(self) -> dict[str, float]:
        """Each metric's mean over the window, and `padding_ratio` (padded slots / all token slots) where
        the batches had attention masks; the window starts over."""
        out = {key: float(total) / self.counts[key] for key, total in self.sums.items()}
        if self.token_slots:
            out["padding_ratio"] = 1.0 - self.real_tokens / self.token_slots
        self.sums, self.counts = {}, {}
        self.real_tokens = self.token_slots = 0
        return out


class _SavedState:
    """A stateful part's state as it was after a given batch: what a checkpoint saves of it."""

    def __init__(self, state: dict[str, Any]):
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        return self.state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError("a saved state is only written")


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


class EngineConfig(Protocol):
    """The sections of a run config the loop reads (`objectives.run_config.RunConfig` has them): the loop
    knows no objective, the recipe carries it."""

    model: ModelConfig
    data: DataConfig
    optim: OptimConfig
    checkpoint: CheckpointConfig
    tracking: TrackingConfig


class Trainer:
    """One worker's view of a run."""

    def __init__(self, cfg: EngineConfig, recipe: TrainingRecipe, total_steps: int, device: torch.device, rank: int,
                 tracker: Any = None, corpus_validator: Optional[Callable[[torch.nn.Module], dict[str, float]]] = None,
                 *, reporter: Reporter):
        self.cfg = cfg
        self.reporter = reporter
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
        # Collate and copy ahead in a background thread where the device computes on its own (a GPU); on
        # CPU the thread would take cores from the step it is meant to overlap.
        self.prefetch = cfg.data.prefetch if cfg.data.prefetch is not None else device.type == "cuda"
        self.feeder = Feeder(device, recipe.count_tokens, recipe.stateful_parts(), asynchronous=self.prefetch)
        self._prefetcher: Optional[Prefetcher] = None  # this epoch's, while one runs
        self._parts_state: Optional[dict[str, Any]] = None  # the stateful parts after the last batch handed out
        # The newest validation metrics ride along with every report, so a Tune
        # scheduler (ASHA) sees its metric in each intermediate result.
        self.latest_validation: dict[str, float] = {}
        self.best_weights: Optional[dict[str, torch.Tensor]] = None  # early stopping with keep: best, on the CPU

    # -- checkpoints -------------------------------------------------------
    def begin(self, checkpoint: Optional[Path] = None) -> None:
        """Restore `checkpoint`, or seed this rank's generators for a fresh start (other masks and
        dropout per rank). Call before `fit`, in the process that trains."""
        if checkpoint is not None:
            self.restore(checkpoint)
        else:
            seed_everything(self.cfg.optim.seed + 1000 * self.rank)

    def restore(self, folder: Path) -> None:
        self.progress, best_weights = load_checkpoint(
            folder, self.rank, self.model, self.objective, self.optimizer, self.scheduler, self.recipe.stateful_parts(),
            self.device, self.precision.scaler)
        self.best_weights = best_weights if self._keeps_best() else None
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
                            self._checkpointed_parts(), self.device, self.precision.scaler, self.best_weights)
            if final and self.rank == 0:
                self.recipe.export(self.model, folder / FINAL_MODEL_DIR)
            self.reporter.report(metrics, folder,
                                 f"checkpoint_step{self.progress.step:08d}" + ("_final" if final else ""))

    def _checkpointed_parts(self) -> dict[str, Any]:
        """The stateful recipe parts as they were after the last batch the step consumed: a prefetching
        collator has already collated the batches after it."""
        parts = self.recipe.stateful_parts()
        if self._parts_state is None:
            return parts
        return {name: _SavedState(self._parts_state[name]) for name in parts}

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
    def _loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, Metric]]:
        """The loss and the metrics of one micro-batch, unread: objectives may return metrics as floats
        or as 0-dim tensors (which the loop reads at logging time only)."""
        with self.precision.autocast():
            loss, metrics = self.objective(self.model, batch)
            for regularizer in self.recipe.regularizers:
                extra, extra_metrics = regularizer(self.model)
                loss = loss + extra
                metrics = {**metrics, **extra_metrics}
        return loss, {"loss": loss.detach(), **metrics}

    def _optimizer_step(self) -> Metric:
        """All-reduce, unscale, clip and step; the gradient norm before clipping, unread (nan without clipping)."""
        D.all_reduce_gradients(self.params)
        self.precision.unscale_(self.optimizer)
        norm: Metric = float("nan")
        if self.cfg.optim.max_grad_norm:
            # foreach=None: the multi-tensor norm where the device has it (CUDA); True would refuse the CPU
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.optim.max_grad_norm, foreach=None).detach()
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

    def _micro_batches(self, train_batches: Any) -> Iterator[FedBatch]:
        """Training micro-batches on the device, epoch after epoch, from the checkpointed position on.

        A batch counts as consumed (`progress.batches_in_epoch`) when it is handed out, so a checkpoint
        taken after its optimizer step records it; an exhausted epoch moves `progress.epoch` on. With
        prefetching, each epoch's batches come from a thread of their own, stopped at the epoch's end
        or when this generator is closed.
        """
        progress = self.progress
        while True:
            handed_out = 0
            source = train_batches(progress.epoch, progress.batches_in_epoch)
            fed = Prefetcher(source, self.feeder) if self.prefetch else self.feeder.feed(source)
            self._prefetcher = fed if isinstance(fed, Prefetcher) else None
            try:
                for item in D.while_all_have_batches(fed, self.device):
                    progress.batches_in_epoch += 1
                    handed_out += 1
                    self._parts_state = item.parts_state
                    yield item
            finally:
                if self._prefetcher is not None:
                    self._prefetcher.close()
                    self._prefetcher = None
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
        stopping = cfg.optim.early_stopping
        if progress.step == 0 and cfg.validates_at_start():
            progress.initial_metrics = initial = self.evaluate(validation_batches())
            if initial:
                self._log({f"{k}_initial": v for k, v in initial.items()} | initial, step=0)
                self._print("before training: " + _fmt(initial))
            if stopping is not None:
                self._plateaued(initial)  # the starting value is the first best
        stopped_early: Optional[dict[str, float]] = None  # the validation at which the run stopped early
        timer = StepTimer(progress.step)
        window = MetricWindow()
        self.model.train()
        batches = self._micro_batches(train_batches)
        try:
            while progress.step < self.total_steps:
                for fed in itertools.islice(batches, accum):
                    loss, metrics = self._loss(fed.wait())
                    self.precision.scale(loss / accum).backward()
                    timer.add(fed.tokens, fed.samples)
                    progress.tokens += fed.tokens
                    progress.samples += fed.samples
                    window.add(metrics)
                    window.add_padding(fed.real_tokens, fed.token_slots)
                grad_norm = self._optimizer_step()
                step = progress.step
                done = step >= self.total_steps
                if step % log_every == 0 or done:
                    self._log_window(window, timer, grad_norm)
                if eval_every and step % eval_every == 0 and not done:
                    with self._paused():
                        val = self.evaluate(validation_batches())
                    self._log(val, step)
                    self._print(f"step {step}: " + _fmt(val))
                    # Every worker evaluates at the same steps, so each calls report equally often.
                    self._report({"loss": float(metrics["loss"])}, with_checkpoint=False)
                    if stopping is not None and self._plateaued(val):
                        stopped_early = val
                        self._log({"early_stopped_at_step": float(step)}, step)
                        self._print(f"early stop at step {step}: {stopping.metric} has not improved on "
                                    f"{progress.best_metric:.4f} (step {progress.best_step}) for {stopping.patience} "
                                    "validations")
                        break
                    self.model.train()
                if step % ckpt_every == 0 and not done:
                    self._report({"loss": float(metrics["loss"])}, with_checkpoint=True)
        finally:
            batches.close()  # stops a prefetching thread
        restore_best = self._keeps_best() and self.best_weights is not None and progress.best_step != progress.step
        if restore_best:
            self.model.load_state_dict(self.best_weights)
            self._print(f"restored the weights of step {progress.best_step} ({stopping.metric} {progress.best_metric:.4f})")
        final = stopped_early if stopped_early is not None and not restore_best else self.evaluate(validation_batches())
        self._log(final, progress.step)
        if final:
            self._print("after training: " + _fmt(final))
        initial = progress.initial_metrics
        tokens = D.sum_over_workers(float(progress.tokens), self.device)
        summary = {**{f"{k}_initial": v for k, v in initial.items()}, **final, "tokens": tokens}
        if stopped_early is not None:
            summary["early_stopped_at_step"] = float(progress.step)
        if restore_best:
            summary["early_stopping_kept_step"] = float(progress.best_step)
        self._report(summary, with_checkpoint=True, final=True)
        return summary

    def _keeps_best(self) -> bool:
        stopping = self.cfg.optim.early_stopping
        return stopping is not None and stopping.keep == "best"

    def _plateaued(self, metrics: dict[str, float]) -> bool:
        """Early stopping's reading of one validation; with keep: best, a new best's weights are copied."""
        stop = plateaued(self.cfg.optim.early_stopping, metrics, self.progress)
        if self._keeps_best() and self.progress.validations_since_best == 0:  # this validation set the best
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return stop

    def _paused(self) -> ContextManager[Any]:
        """No batch is collated in the background inside the block (validation shares the collator)."""
        return self._prefetcher.paused() if self._prefetcher is not None else contextlib.nullcontext()

    def _log_window(self, window: MetricWindow, timer: StepTimer, grad_norm: Metric) -> None:
        """Mean of the window's micro-batch metrics over workers, with lr, grad norm and throughput: logged and printed."""
        step = self.progress.step
        logged = D.mean_over_workers(window.means(), self.device)
        speed = timer.window(step, self.total_steps)
        world = D.world_size()
        logged |= {
            "lr": self.scheduler.get_last_lr()[0],
            "grad_norm": float(grad_norm),
            "tokens_per_s": speed["tokens_per_s"] * world,
            "samples_per_s": speed["samples_per_s"] * world,
        }
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
