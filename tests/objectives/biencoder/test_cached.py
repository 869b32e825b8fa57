"""GradCache (`objective.mini_batch_size`) against plain InfoNCE on a tiny BERT with dropout on: the same loss
and the same gradients, for the encoder and for the learnable temperature, with and without hard negatives,
and with gradient checkpointing inside GradCache's second pass."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from lmplatform.models.encoder import Encoder
from lmplatform.models.gradient_checkpointing import enable_gradient_checkpointing
from lmplatform.objectives.biencoder.objective import BiencoderObjective, QueryDocumentCollator
from lmplatform.objectives.infonce import Temperature

QUERIES = ["printer jams", "vpn drops", "disk full", "login timeout", "payment failed", "app crash"]
DOCUMENTS = ["paper jam tray", "vpn tunnel error", "disk memory", "login server timeout", "payment gateway invoice",
             "mobile app crash"]
NEGATIVES = [["backup queue"], ["certificate expired"], ["network error"], ["user report"], ["screen button"], ["restart server"]]


class ChunkedEncoder(nn.Module):
    """`encoder` applied `size` rows at a time, with autograd: plain InfoNCE over the very embeddings GradCache
    computes (from the same seed the same chunks draw the same dropout)."""

    def __init__(self, encoder: Encoder, size: int):
        super().__init__()
        self.encoder, self.size = encoder, size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.encoder(input_ids=ids, attention_mask=mask)
                          for ids, mask in zip(input_ids.split(self.size), attention_mask.split(self.size))])


def _loss_and_gradients(objective: BiencoderObjective, applied_to: nn.Module, encoder: Encoder, batch: dict,
                        seed: int) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss and the gradient of every parameter of encoder and temperature after backward of a scaled
    loss (a quarter, as 4 accumulation steps send into it)."""
    torch.manual_seed(seed)
    loss, _ = objective(applied_to, batch)
    (loss / 4).backward()
    params = dict(encoder.named_parameters()) | {"log_tau": objective.temperature.log_tau}
    grads = {name: p.grad.clone() for name, p in params.items() if p.grad is not None}
    for p in params.values():
        p.grad = None
    return float(loss.detach()), grads


@pytest.mark.parametrize(("mini_batch_size", "negatives", "checkpointing"),
                         [(2, "none", False), (4, "present", False), (8, "present", False), (4, "empty", False),
                          (4, "present", True)])
def test_cached_infonce_matches_plain_infonce_with_dropout(mini_batch_size: int, negatives: str, checkpointing: bool,
                                                           tiny_bert: Path) -> None:
    torch.manual_seed(0)
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=16).train()
    if checkpointing:
        enable_gradient_checkpointing(encoder)
    assert encoder.backbone.config.hidden_dropout_prob > 0
    rows = {"query": np.array(QUERIES, dtype=object), "document": np.array(DOCUMENTS, dtype=object)}
    if negatives == "present":
        rows["hard_negatives"] = np.array(NEGATIVES, dtype=object)
    batch = QueryDocumentCollator(encoder.tokenizer, 16, max_hard_negatives=1)(rows)
    # "empty": the data has a hard-negative field but this batch holds none (an empty negatives tensor)
    uses_hard_negatives = negatives != "none"
    temperature = Temperature(0.1, learnable=True)
    plain = BiencoderObjective(temperature, symmetric=True, uses_hard_negatives=uses_hard_negatives)
    cached = BiencoderObjective(temperature, symmetric=True, uses_hard_negatives=uses_hard_negatives,
                                mini_batch_size=mini_batch_size)

    expected_loss, expected = _loss_and_gradients(plain, ChunkedEncoder(encoder, mini_batch_size), encoder, batch, seed=3)
    loss, got = _loss_and_gradients(cached, encoder, encoder, batch, seed=3)

    assert loss == pytest.approx(expected_loss, rel=1e-6)
    assert got.keys() == expected.keys() and "log_tau" in got and len(got) > 10
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-7, msg=name)
    # Dropout is on: another seed gives another loss, so the equal gradients needed the replayed random state.
    other_loss, _ = _loss_and_gradients(plain, ChunkedEncoder(encoder, mini_batch_size), encoder, batch, seed=4)
    assert other_loss != pytest.approx(expected_loss, rel=1e-4)


def test_cached_objective_without_autograd_is_the_plain_loss(tiny_bert: Path) -> None:
    torch.manual_seed(0)
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=16).eval()
    batch = QueryDocumentCollator(encoder.tokenizer, 16)({"query": np.array(QUERIES, dtype=object),
                                                          "document": np.array(DOCUMENTS, dtype=object)})
    temperature = Temperature(0.1, learnable=False)
    with torch.no_grad():
        plain, _ = BiencoderObjective(temperature)(encoder, batch)
        cached, metrics = BiencoderObjective(temperature, mini_batch_size=2)(encoder, batch)
    assert float(cached) == pytest.approx(float(plain), rel=1e-6)
    assert float(metrics["ranking_loss"]) == pytest.approx(float(plain), rel=1e-6)
