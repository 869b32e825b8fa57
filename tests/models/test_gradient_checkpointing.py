"""`model.gradient_checkpointing`: the loop turns it on in the encoder's transformer, and training with it
follows the run without it (dropout on: non-reentrant checkpointing replays each layer's random state)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from lmplatform.models.gradient_checkpointing import enable_gradient_checkpointing
from tests.train.pair_runs import fit_pairs, pair_config, pair_trainer


def test_checkpointed_training_follows_the_plain_run(tiny_bert: Path, tmp_path: Path) -> None:
    # each run starts from its trainer's seeding (built and trained one after the other)
    plain = pair_trainer(pair_config(tiny_bert, ["optim.max_steps=3"]), tmp_path / "plain")
    expected = fit_pairs(plain)
    checkpointed = pair_trainer(pair_config(tiny_bert, ["optim.max_steps=3", "model.gradient_checkpointing=true"]),
                                tmp_path / "checkpointed")
    got = fit_pairs(checkpointed)

    assert _checkpointing(checkpointed.model) and not _checkpointing(plain.model)
    assert checkpointed.model.backbone.config.hidden_dropout_prob > 0

    assert got["val_ranking_loss"] == pytest.approx(expected["val_ranking_loss"], rel=1e-5)
    assert got["val_ranking_loss"] != pytest.approx(got["val_ranking_loss_initial"], rel=1e-3)  # it trained
    for (name, a), b in zip(plain.model.state_dict().items(), checkpointed.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def _checkpointing(model: nn.Module) -> bool:
    """Whether some layer of `model` recomputes its activations (the flag Hugging Face's layers read)."""
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def test_a_model_without_a_transformer_is_refused() -> None:
    with pytest.raises(ValueError, match=r"model\.gradient_checkpointing: Linear holds no Hugging Face transformer"):
        enable_gradient_checkpointing(nn.Linear(2, 2))
