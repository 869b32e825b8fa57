"""Bi-encoder objective on a tiny BERT: collate, loss with hard negatives, learning, retrieval metrics."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lmplatform.models.encoder import Encoder
from lmplatform.objectives.biencoder.objective import (
    BiencoderObjective,
    InBatchRetrievalEvaluator,
    QueryDocumentCollator,
    count_pair_tokens,
)
from lmplatform.objectives.infonce import Temperature, info_nce
from tests.objectives.fitting import fit_one_batch

QUERIES = ["printer jams", "vpn drops", "disk full", "login timeout", "payment failed", "app crash"]
DOCUMENTS = ["paper jam tray", "vpn tunnel error", "disk memory", "login server timeout", "payment gateway invoice",
             "mobile app crash"]


def _batch(hard: bool = False) -> dict[str, np.ndarray]:
    batch = {"query": np.array(QUERIES, dtype=object), "document": np.array(DOCUMENTS, dtype=object)}
    if hard:
        batch["hard_negatives"] = np.array([["backup queue", "certificate expired"]] * len(QUERIES), dtype=object)
    return batch


def test_collator_and_loss_use_hard_negatives(tiny_bert: Path) -> None:
    torch.manual_seed(0)
    model = Encoder.from_pretrained(tiny_bert, max_seq_length=16)
    collate = QueryDocumentCollator(model.tokenizer, 16, max_hard_negatives=1)
    batch = collate(_batch(hard=True))
    assert batch["query_input_ids"].shape[0] == 6 and batch["negative_input_ids"].shape[0] == 6  # 1 per pair
    assert count_pair_tokens(batch) == int(sum(batch[k].sum() for k in batch if k.endswith("attention_mask")))
    assert "negative_input_ids" not in QueryDocumentCollator(model.tokenizer, 16)(_batch(hard=True))

    objective = BiencoderObjective(Temperature(0.05, learnable=False), symmetric=False)
    loss, metrics = objective(model, batch)
    with torch.no_grad():
        q, d, n = (model(batch[f"{p}_input_ids"], batch[f"{p}_attention_mask"]) for p in ("query", "document", "negative"))
    expected = info_nce(q, d, 0.05, hard_negatives=n).loss
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert float(metrics["temperature"]) == pytest.approx(0.05) and 0 <= float(metrics["inbatch_accuracy"]) <= 1


@pytest.mark.parametrize("hard", [False, True])
def test_one_pass_gives_the_loss_and_gradients_of_a_pass_per_kind(tiny_bert: Path, hard: bool) -> None:
    torch.manual_seed(0)
    model = Encoder.from_pretrained(tiny_bert, max_seq_length=16)  # eval mode: no dropout
    batch = QueryDocumentCollator(model.tokenizer, 16, max_hard_negatives=1)(_batch(hard=hard))
    assert batch["query_input_ids"].shape[1] < batch["document_input_ids"].shape[1]  # one pass pads the queries
    passes: list[int] = []
    model.register_forward_hook(lambda *_: passes.append(1))
    results = []
    for one_pass in (False, True, None):
        passes.clear()
        objective = BiencoderObjective(Temperature(0.05, learnable=False), uses_hard_negatives=hard, one_pass=one_pass)
        loss, _ = objective(model, batch)
        loss.backward()
        results.append((float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                        len(passes)))
        model.zero_grad(set_to_none=True)
    (per_kind_loss, per_kind, per_kind_passes), (one_loss, one, one_passes), (_, _, default_passes) = results
    assert (per_kind_passes, one_passes) == (3 if hard else 2, 1)
    assert default_passes == per_kind_passes  # None: a pass per kind on a CPU batch
    assert one_loss == pytest.approx(per_kind_loss, rel=1e-5)
    assert per_kind.keys() == one.keys() and len(per_kind) > 10
    for name in per_kind:
        torch.testing.assert_close(one[name], per_kind[name], rtol=1e-4, atol=1e-6, msg=name)


def test_training_raises_in_batch_retrieval(tiny_bert: Path) -> None:
    torch.manual_seed(0)
    model = Encoder.from_pretrained(tiny_bert, max_seq_length=16)
    collate = QueryDocumentCollator(model.tokenizer, 16)
    batch = collate(_batch())
    temperature = Temperature(0.1, learnable=True)
    objective = BiencoderObjective(temperature, symmetric=True)
    inbatch = InBatchRetrievalEvaluator(temperature)

    def evaluator(model: Encoder, batches: list) -> dict:  # as the loop runs every evaluator
        with torch.inference_mode():
            return inbatch(model, batches)

    before = evaluator(model, [batch])
    metrics = fit_one_batch(objective, model, batch)
    after = evaluator(model, [batch])
    assert {k: w for k, (_, w) in after.items()} == {k: 6.0 for k in after}
    assert after["inbatch_candidates"][0] / 6 == 6
    assert after["ranking_loss"][0] < before["ranking_loss"][0]
    assert after["inbatch_mrr"][0] / 6 > before["inbatch_mrr"][0] / 6
    assert after["inbatch_accuracy"][0] / 6 == pytest.approx(1.0)
    assert "ranking_k2q_loss" in metrics and float(metrics["temperature"]) != pytest.approx(0.1)


def test_retrieval_metrics_against_hand_ranks(tiny_bert: Path) -> None:
    class Fixed(torch.nn.Module):
        """Embeds each text as a fixed vector so the ranks are known."""

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return input_ids[:, :2].float()

    batch = {
        "query_input_ids": torch.tensor([[1, 0], [0, 1], [1, 1]]), "query_attention_mask": torch.ones(3, 2),
        "document_input_ids": torch.tensor([[1, 0], [1, 1], [0, 1]]), "document_attention_mask": torch.ones(3, 2),
    }
    # scores (cosine): q0 -> own d0 first (rank 1); q1 -> d2 beats own d1 (rank 2); q2 -> own d2 (0.707)
    # is behind d1 (1.0) and tied with d0 (0.707): ties count against the query, rank 3
    out = InBatchRetrievalEvaluator(Temperature(0.5, learnable=False))(Fixed(), [batch])
    assert out["inbatch_accuracy"] == (1.0, 3.0)
    assert out["inbatch_mrr"][0] == pytest.approx(1 + 1 / 2 + 1 / 3)
