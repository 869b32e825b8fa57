"""The MLM objective learns a toy corpus; its evaluator is deterministic and its pseudo-perplexity sane."""

import pytest
import torch

from lmplatform.objectives.mlm.objective import MLMEvaluator, MLMObjective
from lmplatform.train.collate import TextCollator


def test_loss_decreases_on_a_toy_corpus(mlm_parts) -> None:
    tokenizer, model, masker = mlm_parts
    torch.manual_seed(0)
    collate = TextCollator(tokenizer, 16)
    batch = collate.encode(["printer error on floor two"] * 16)
    objective = MLMObjective(masker)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, metrics = objective(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(metrics["mlm_loss"]))
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5


def test_evaluator_is_deterministic_and_pseudo_perplexity_is_sane(mlm_parts) -> None:
    tokenizer, model, masker = mlm_parts
    batches = [TextCollator(tokenizer, 32).encode(["the vpn tunnel drops", "invoice totals are wrong today"])]
    evaluator = MLMEvaluator(masker, pppl_sentences=2)
    first = evaluator(model, batches)
    second = evaluator(model, batches)
    assert first == second
    summary = MLMEvaluator.summarize({k: s / w for k, (s, w) in first.items()})
    # A random model is close to uniform over the vocabulary: perplexity near |V|.
    assert 0.2 * len(tokenizer) < summary["pseudo_perplexity"] < 5 * len(tokenizer)
    assert summary["perplexity"] == pytest.approx(torch.tensor(summary["mlm_loss"]).exp().item(), rel=1e-6)
