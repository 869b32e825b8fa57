"""`optim.precision`: bf16 autocast trains through the real loop on CPU, `auto` resolves on the worker's device,
fp16 is refused without a GPU, and fp16's loss scale skips an overflowing step without moving the schedule and
survives a checkpoint."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from lmplatform.config import ConfigError
from lmplatform.objectives.trainer import build_trainer
from lmplatform.train.loop import FolderReporter
from tests.train.pair_runs import fit_pairs, pair_config, pair_trainer


def test_bf16_training_on_cpu_lowers_the_loss(tiny_bert: Path, tmp_path: Path) -> None:
    trainer = pair_trainer(pair_config(tiny_bert, ["optim.precision=bf16", "optim.max_steps=6"]), tmp_path)
    dtypes: set[tuple[bool, torch.dtype]] = set()
    first_linear = next(m for m in trainer.model.modules() if isinstance(m, nn.Linear))
    first_linear.register_forward_hook(lambda module, args, output: dtypes.add((module.training, output.dtype)))

    summary = fit_pairs(trainer)

    # training and validation forward passes both ran under bf16 autocast; the weights stay fp32
    assert dtypes == {(True, torch.bfloat16), (False, torch.bfloat16)}
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    print(f"bf16: validation ranking loss {summary['val_ranking_loss_initial']:.4f} -> {summary['val_ranking_loss']:.4f}")
    assert summary["val_ranking_loss"] < 0.8 * summary["val_ranking_loss_initial"]


def test_fp16_without_a_gpu_is_refused(tiny_bert: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"optim\.precision 'fp16' needs a GPU.*'bf16' or 'fp32'"):
        pair_config(tiny_bert, ["optim.precision=fp16", "optim.max_steps=1"])
    # A GPU run's config is valid; a worker that still finds no CUDA device refuses before training.
    cfg = pair_config(tiny_bert, ["optim.precision=fp16", "optim.max_steps=1", "scaling.use_gpu=true"])
    with pytest.raises(ValueError, match=r"optim\.precision 'fp16' needs a CUDA device.*'bf16' or 'fp32'"):
        pair_trainer(cfg, tmp_path)


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_resolves_on_the_worker_s_device(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       native: bool) -> None:
    monkeypatch.setattr("lmplatform.models.precision.native_bf16", lambda device: native)
    trainer = pair_trainer(pair_config(tiny_bert, ["optim.precision=auto", "optim.max_steps=1"]), tmp_path)
    assert trainer.precision.precision == ("bf16" if native else "fp32")
    assert not trainer.precision.scaler.is_enabled()


def test_overflowing_fp16_step_is_skipped_and_the_loss_scale_is_checkpointed(tiny_bert: Path, tmp_path: Path) -> None:
    cfg = pair_config(tiny_bert, ["optim.max_steps=4", "optim.scheduler=linear"])  # the rate falls every step
    trainer = pair_trainer(cfg, tmp_path / "run")
    # fp16's loss-scale logic without a GPU: a CPU GradScaler in place of the disabled one (the loop refuses
    # fp16 autocast on CPU, the scaler itself works there).
    trainer.precision.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    weights = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    lr = trainer.scheduler.get_last_lr()

    def backward_of_scaled_loss() -> None:  # every gradient is the loss scale (1 once unscaled)
        trainer.precision.scale(sum(p.sum() for p in trainer.params)).backward()

    backward_of_scaled_loss()
    trainer.params[0].grad.view(-1)[0] = float("inf")  # an overflow
    trainer._optimizer_step()
    assert trainer.progress.step == 1 and trainer.precision.scaler.get_scale() == 2.0**11
    assert trainer.scheduler.get_last_lr() == lr  # the schedule waits for an update actually made
    for name, p in trainer.model.named_parameters():
        torch.testing.assert_close(p.detach(), weights[name], rtol=0, atol=0, msg=name)

    backward_of_scaled_loss()
    trainer._optimizer_step()
    assert trainer.progress.step == 2 and trainer.precision.scaler.get_scale() == 2.0**11
    assert trainer.scheduler.get_last_lr() != lr
    assert any(not torch.equal(p.detach(), weights[name]) for name, p in trainer.model.named_parameters())

    trainer._report({"loss": 0.0}, with_checkpoint=True)
    (checkpoint,) = trainer.reporter.checkpoints
    resumed = build_trainer(cfg, 4, torch.device("cpu"), 0, reporter=FolderReporter(tmp_path / "resumed"))
    resumed.precision.scaler = torch.amp.GradScaler("cpu")  # a fresh scaler starts at 2**16
    resumed.begin(checkpoint)
    assert resumed.precision.scaler.state_dict() == trainer.precision.scaler.state_dict()
    assert resumed.scheduler.get_last_lr() == trainer.scheduler.get_last_lr()

