"""Cross-encoder negatives (random, hard, mined), collate, BCE training and re-rank metrics on a tiny BERT."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lmplatform.data.pairs import Pair
from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.objectives.cross_encoder.objective import (
    CrossEncoderObjective,
    GroupCollator,
    RerankEvaluator,
    choose_negatives,
    mine_candidates,
)
from tests.objectives.fitting import fit_one_batch

PAIRS = [
    Pair("printer jams", "paper jam tray"),
    Pair("printer jams", "printer error report"),  # a second positive of the same query
    Pair("vpn drops", "vpn tunnel error", ("certificate expired",)),
    Pair("disk full", "disk memory"),
    Pair("login timeout", "login server timeout"),
    Pair("payment failed", "payment gateway invoice"),
]


def test_random_negatives_never_include_a_positive_and_put_hard_negatives_first() -> None:
    negatives = choose_negatives(PAIRS, 3, np.random.default_rng(0))
    assert [len(n) for n in negatives] == [3] * len(PAIRS)
    for pair, chosen in zip(PAIRS, negatives):
        assert len(set(chosen)) == 3
        positives = {p.document for p in PAIRS if p.query == pair.query}
        assert not positives & set(chosen)
    assert negatives[2][0] == "certificate expired"
    assert choose_negatives(PAIRS, 3, np.random.default_rng(0)) == negatives  # seeded
    # fewer other documents than asked: as many as there are
    assert [len(n) for n in choose_negatives(PAIRS[:2], 3, np.random.default_rng(0))] == [0, 0]


def test_mined_negatives_come_from_the_miners_top_k(tiny_bert: Path) -> None:
    documents = sorted({p.document for p in PAIRS})
    ranked = mine_candidates(PAIRS, documents, str(tiny_bert), top_k=2)
    assert all(len(r) == min(len(documents), 2 + 2) for r in ranked)
    negatives = choose_negatives(PAIRS, 2, np.random.default_rng(0), use_hard_negatives=False, mined=ranked,
                                 documents=documents, top_k=2)
    for pair, chosen, order in zip(PAIRS, negatives, ranked):
        positives = {p.document for p in PAIRS if p.query == pair.query}
        top = [documents[i] for i in order if documents[i] not in positives][:2]
        assert chosen == top  # k == top_k: exactly the miner's best non-positives, in rank order


def test_bce_training_separates_positives_and_metrics_are_weighted(tiny_bert: Path) -> None:
    torch.manual_seed(0)
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=24)
    groups = {
        "query": np.array([p.query for p in PAIRS[2:]], dtype=object),
        "document": np.array([p.document for p in PAIRS[2:]], dtype=object),
        "negatives": np.array([[q.document for q in PAIRS[2:] if q is not p][:2] for p in PAIRS[2:]], dtype=object),
    }
    batch = GroupCollator(model)(groups)
    assert batch["labels"].tolist() == [1.0, 0.0, 0.0] * 4 and batch["group_ids"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    evaluator = RerankEvaluator()
    before = evaluator(model, [batch])
    objective = CrossEncoderObjective()
    metrics = fit_one_batch(objective, model, batch)
    after = evaluator(model, [batch])
    assert after["bce_loss"][1] == 12 and after["inbatch_pairwise_accuracy"][1] == 8 and after["inbatch_mrr"][1] == 4
    assert after["bce_loss"][0] < before["bce_loss"][0]
    assert set(metrics) == {"bce_loss", "accuracy"}


def test_rerank_metrics_against_hand_computation() -> None:
    class Fixed(torch.nn.Module):
        """The logit is the first input id, so scores are known."""

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return input_ids[:, 0].float()

    batch = {
        "input_ids": torch.tensor([[3], [1], [-2], [0], [2], [5]]), "attention_mask": torch.ones(6, 1),
        "labels": torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]), "group_ids": torch.tensor([0, 0, 0, 1, 1, 1]),
    }
    out = RerankEvaluator()(Fixed(), [batch])
    # group 0: positive 3 beats 1 and -2 (rank 1); group 1: positive 0 loses to 2 and 5 (rank 3)
    assert out["inbatch_pairwise_accuracy"] == (2.0, 4.0)
    assert out["inbatch_mrr"] == (pytest.approx(1 + 1 / 3), 2.0)
    # logit > 0 means "relevant": right on 3, -2, and wrong on 1, 0, 2, 5
    assert out["accuracy"] == (2.0, 6.0)
    expected_bce = float(torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor([3.0, 1, -2, 0, 2, 5]), batch["labels"], reduction="sum"))
    assert out["bce_loss"][0] == pytest.approx(expected_bce)
