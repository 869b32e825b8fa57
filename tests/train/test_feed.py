"""The loop's host side: prefetched batches are the direct path's batches, a micro-step reads nothing
back from the device, and the multi-tensor AdamW makes the per-parameter loop's update."""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from lmplatform.config.schema import OptimConfig
from lmplatform.objectives.run_config import load_run_config
from lmplatform.train.collate import TextCollator
from lmplatform.train.feed import FedBatch, Feeder, Prefetcher
from lmplatform.train.ingest import resume_batches
from lmplatform.train.loop import Trainer
from lmplatform.train.optim import build_optimizer
from lmplatform.train.recipe import Batch
from tests.conftest import TOKEN_WORDS
from tests.train.pair_runs import fit_pairs, pair_batches, pair_config, pair_trainer

CPU = torch.device("cpu")


def _text_batches(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(TOKEN_WORDS, size=rng.integers(3, 20))) for _ in range(4 * n)]
    return [{"text": np.array(texts[i:i + 4], dtype=object)} for i in range(0, len(texts), 4)]


def _count(batch: Batch) -> int:
    return int(batch["attention_mask"].sum())


def _as_lists(items: Any) -> list[tuple[dict[str, list], int, int, int, int]]:
    return [({k: v.tolist() for k, v in item.batch.items()}, item.tokens, item.samples, item.real_tokens, item.token_slots)
            for item in items]


@pytest.mark.parametrize("skip", [0, 3])
def test_prefetched_batches_are_the_direct_batches_in_order(tiny_bert: Path, skip: int) -> None:
    collate = TextCollator(AutoTokenizer.from_pretrained(str(tiny_bert)), max_length=32)
    raw = _text_batches(7)
    feeder = Feeder(CPU, _count)
    direct = _as_lists(feeder.feed(resume_batches(iter(raw), collate, skip)))
    with Prefetcher(resume_batches(iter(raw), collate, skip), feeder) as prefetched:
        ahead = _as_lists(prefetched)
    assert len(direct) == 7 - skip and ahead == direct
    assert all(tokens == real <= slots for _, tokens, _, real, slots in direct)


def test_an_error_in_the_thread_reaches_the_consumer_and_the_thread_ends() -> None:
    def source() -> Iterator[int]:
        yield from range(3)
        raise ValueError("bad row 3")

    prefetcher = Prefetcher(source(), lambda item: item * 10)
    got = []
    with pytest.raises(ValueError, match="bad row 3"):
        for item in prefetcher:
            got.append(item)
    assert got == [0, 10, 20] and not prefetcher._thread.is_alive()


def test_closing_early_stops_the_thread() -> None:
    prefetcher = Prefetcher(iter(range(1000)), lambda item: item)
    assert next(prefetcher) == 0
    prefetcher.close()
    assert not prefetcher._thread.is_alive()
    assert [t for t in threading.enumerate() if t.name == "lmp-prefetch"] == []
    with pytest.raises(StopIteration):
        next(prefetcher)


def test_the_loop_trains_the_same_with_and_without_prefetching(tiny_bert: Path, tmp_path: Path) -> None:
    summaries = []
    for prefetch in (False, True):
        cfg = pair_config(tiny_bert, ["optim.max_steps=4", f"data.prefetch={str(prefetch).lower()}"])
        trainer = pair_trainer(cfg, tmp_path / str(prefetch))
        assert trainer.prefetch is prefetch
        summaries.append((fit_pairs(trainer), [p.detach().clone() for p in trainer.model.parameters()]))
    (plain, plain_weights), (ahead, ahead_weights) = summaries
    assert plain == ahead
    assert all(torch.equal(a, b) for a, b in zip(plain_weights, ahead_weights))
    assert [t for t in threading.enumerate() if t.name == "lmp-prefetch"] == []


# -- host syncs ---------------------------------------------------------------------------------------

CONVERSIONS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__")
# Where the step's own reads would come from: the loop and its helpers, clipping, the loss scale.
# Objectives may still return floats (their own reads); the collate and the counts run in the feed.
STEP_MODULES = ("lmplatform.train.", "torch.nn.utils.clip_grad", "torch.amp.")


class Recorder:
    """A tracker that keeps what the loop logs."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.logged.append((step, dict(metrics)))


def _spy_on_reads(monkeypatch: pytest.MonkeyPatch, trainer: Trainer, modules: tuple[str, ...]) -> dict[int, list[str]]:
    """Every read of a tensor's value on the training thread from code of `modules` (not the feed's), by the
    optimizer step under way when it happened; `monkeypatch.undo()` ends the spying."""
    main = threading.get_ident()
    reads: dict[int, list[str]] = {}

    def spy(name: str) -> Any:
        real = getattr(torch.Tensor, name)

        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if threading.get_ident() == main and caller.startswith(modules) and caller != "lmplatform.train.feed":
                reads.setdefault(trainer.progress.step, []).append(f"{caller}:{name}")
            return real(self, *args, **kwargs)

        return read

    for name in CONVERSIONS:
        monkeypatch.setattr(torch.Tensor, name, spy(name))
    return reads


def test_a_micro_step_reads_nothing_back_from_the_device(tiny_bert: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    steps = 5
    cfg = pair_config(tiny_bert, [f"optim.max_steps={steps}", "optim.grad_accum_steps=2", "tracking.log_every_n_steps=1000",
                                  "data.prefetch=true"])  # the collate and the counts run on another thread
    trainer = pair_trainer(cfg, tmp_path)
    trainer.tracker = Recorder()
    reads = _spy_on_reads(monkeypatch, trainer, STEP_MODULES)
    batches = pair_batches(rows=8)

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        return resume_batches(iter(batches), trainer.recipe.collate, skip)

    trainer.fit(train_batches, lambda: None)
    monkeypatch.undo()

    # every step's micro-steps and optimizer step run while progress.step is one less; only the last logs
    during = {step: reads.get(step, []) for step in range(steps)}
    assert all(len(found) <= 1 for found in during.values()), during
    assert reads.get(steps), "the logging step reads the window (the spy sees reads)"
    (logged_step, logged), = trainer.tracker.logged
    assert logged_step == steps and np.isfinite(logged["loss"]) and np.isfinite(logged["grad_norm"])
    assert 0.0 < logged["padding_ratio"] < 1.0  # pairs of different lengths pad


# The real objectives: their metrics stay device tensors until the logging step, and neither they, the
# masker nor our models branch on a tensor's value. (Hugging Face's BERT still checks its attention mask
# on the host, transformers.masking_utils, and a CPU optimizer's step counter is read on the host: neither
# module is watched.)
OBJECTIVE_RUNS = {
    "biencoder": ([], lambda: pair_batches(rows=8), {"ranking_loss", "inbatch_accuracy", "temperature"}),
    "mlm": (["objective.name=mlm"], lambda: _text_batches(4), {"mlm_loss", "mlm_accuracy"}),
    "mlm-whole-word": (["objective.name=mlm", "objective.whole_word=true"], lambda: _text_batches(4),
                       {"mlm_loss", "mlm_accuracy"}),
}


@pytest.mark.parametrize("objective", list(OBJECTIVE_RUNS))
def test_real_objectives_read_nothing_back_outside_logging_steps(objective: str, tiny_bert: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    overrides, make_batches, names = OBJECTIVE_RUNS[objective]
    steps = 4
    common = [f"optim.max_steps={steps}", "optim.grad_accum_steps=2", "tracking.log_every_n_steps=1000", "data.prefetch=true"]
    if objective == "biencoder":
        cfg = pair_config(tiny_bert, common)
    else:
        cfg = load_run_config(None, [
            f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", "data.train_paths=[unused.jsonl]",
            "optim.batch_size=4", "optim.lr=1e-3", "optim.warmup_steps=0", "optim.seed=7",
            "checkpoint.every_n_steps=1000", "scaling.cpus_per_worker=1", *common, *overrides,
        ])
    trainer = pair_trainer(cfg, tmp_path)
    trainer.tracker = Recorder()
    reads = _spy_on_reads(monkeypatch, trainer, ("lmplatform.", *STEP_MODULES))
    batches = make_batches()
    trainer.fit(lambda epoch, skip: resume_batches(iter(batches), trainer.recipe.collate, skip), lambda: None)
    monkeypatch.undo()

    during = {step: reads[step] for step in range(steps) if step in reads}
    assert during == {}, during
    assert any(read.startswith("lmplatform.train.loop:") for read in reads[steps])  # the window, read once
    (logged_step, logged), = trainer.tracker.logged
    assert logged_step == steps and names | {"loss", "grad_norm"} <= set(logged)
    assert all(isinstance(logged[name], float) and np.isfinite(logged[name]) for name in names)


# -- AdamW kernels ------------------------------------------------------------------------------------

def test_multi_tensor_adamw_and_clipping_match_the_per_parameter_loop(tiny_bert: Path) -> None:
    cfg = OptimConfig(lr=1e-3, weight_decay=0.01)
    models = [BertModel.from_pretrained(str(tiny_bert)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())  # the same pooler too (initialised at random on loading)
    optimizers = []
    for model in models:
        params = [p for p in model.parameters() if p.requires_grad]
        names = {id(p): n for n, p in model.named_parameters()}
        optimizers.append(build_optimizer(params, names, cfg))
    new = optimizers[1]
    assert all(group["foreach"] and not group["fused"] for group in new.param_groups)
    # the path before: the same groups, torch's defaults (the per-parameter loop on CPU), clipping one tensor at a time
    old = torch.optim.AdamW([{k: v for k, v in g.items() if k not in ("foreach", "fused")} for g in optimizers[0].param_groups],
                            lr=cfg.lr, eps=cfg.adam_eps, foreach=False)
    ids = torch.randint(1000, 2000, (4, 12), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        for model, optimizer, foreach in ((models[0], old, False), (models[1], new, None)):
            model(input_ids=ids).last_hidden_state.pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)

    # a checkpoint of the old optimizer keeps this device's kernel when loaded
    new.load_state_dict(old.state_dict())
    assert all(group["foreach"] and not group["fused"] for group in new.param_groups)
    assert all(state["step"].device == CPU for state in new.state.values())


def test_fed_batches_wait_for_nothing_on_cpu() -> None:
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}
    fed = Feeder(CPU, _count, asynchronous=True)(batch)
    assert isinstance(fed, FedBatch) and fed.ready is None and fed.wait() is fed.batch
    assert (fed.tokens, fed.samples, fed.real_tokens, fed.token_slots) == (3, 2, 3, 6)
