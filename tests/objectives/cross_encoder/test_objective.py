"""Cross-encoder negatives (random, hard, mined; never the query's group), collate, BCE and listwise training,
the listwise loss against its definition, and re-rank metrics on a tiny BERT."""
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
    listwise_softmax_loss,
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


def test_no_text_of_the_querys_duplicate_group_is_ever_a_negative() -> None:
    # "jam a" and "jam b" duplicate "paper jam" through different pairs: one group, though no pair links them
    pairs = [Pair("jam a", "paper jam", group="g1"), Pair("jam b", "paper jam", group="g1"),
             Pair("vpn drops", "vpn tunnel", group="g2"), Pair("disk full", "disk memory", group="g3")]
    for seed in range(20):
        for pair, chosen in zip(pairs, choose_negatives(pairs, 3, np.random.default_rng(seed))):
            group = {t for p in pairs if p.group == pair.group for t in (p.query, p.document)}
            assert not group & set(chosen), (pair, chosen)
    # without group ids, the texts linked through the pairs are the group
    linked = [Pair(p.query, p.document) for p in pairs]
    negatives = choose_negatives(linked + [Pair("jam a", "jam b")], 3, np.random.default_rng(0))
    assert not {"jam a", "jam b", "paper jam"} & set(negatives[0] + negatives[1])


def test_mined_negatives_come_from_the_miners_top_k(tiny_bert: Path) -> None:
    documents = sorted({p.document for p in PAIRS})
    ranked = mine_candidates(PAIRS, documents, str(tiny_bert), top_k=2)
    # deep enough for top_k non-group documents: 2 + the largest group's texts (printer jams and its two documents)
    assert all(len(r) == min(len(documents), 2 + 3) for r in ranked)
    negatives = choose_negatives(PAIRS, 2, np.random.default_rng(0), use_hard_negatives=False, mined=ranked,
                                 documents=documents, top_k=2)
    for pair, chosen, order in zip(PAIRS, negatives, ranked):
        positives = {p.document for p in PAIRS if p.query == pair.query}
        top = [documents[i] for i in order if documents[i] not in positives][:2]
        assert chosen == top  # k == top_k: exactly the miner's best non-positives, in rank order


def _model_and_four_groups(tiny_bert: Path) -> tuple[CrossEncoder, dict]:
    """A seeded tiny cross-encoder and one batch: the last four pairs, each with two other pairs' documents."""
    torch.manual_seed(0)
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=24)
    groups = {
        "query": np.array([p.query for p in PAIRS[2:]], dtype=object),
        "document": np.array([p.document for p in PAIRS[2:]], dtype=object),
        "negatives": np.array([[q.document for q in PAIRS[2:] if q is not p][:2] for p in PAIRS[2:]], dtype=object),
    }
    return model, GroupCollator(model)(groups)


def test_bce_training_separates_positives_and_metrics_are_weighted(tiny_bert: Path) -> None:
    model, batch = _model_and_four_groups(tiny_bert)
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


def test_listwise_loss_is_each_groups_softmax_cross_entropy() -> None:
    logits = torch.tensor([2.0, 0.5, -1.0, 0.3, 1.2, 4.0, -2.0], requires_grad=True)
    labels = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    group_ids = torch.tensor([7, 7, 7, 3, 3, 3, 9])  # unequal sizes; a group of its positive alone
    loss = listwise_softmax_loss(logits, labels, group_ids)
    by_hand = [torch.nn.functional.cross_entropy(logits[i:j][None], torch.tensor([p]))
               for i, j, p in ((0, 3, 0), (3, 6, 1), (6, 7, 0))]
    assert float(loss) == pytest.approx(float(sum(by_hand) / 3), rel=1e-6)
    assert (float(listwise_softmax_loss(logits, labels, group_ids, reduction="sum"))
            == pytest.approx(float(sum(by_hand)), rel=1e-6))
    # members need not be adjacent: the same groups, shuffled
    order = torch.tensor([6, 3, 0, 5, 1, 4, 2])
    assert float(listwise_softmax_loss(logits[order], labels[order], group_ids[order])) == pytest.approx(float(loss), rel=1e-6)
    # only differences within a group count: shifting a whole group changes nothing (BCE would change)
    shifted = logits.detach() + torch.tensor([5.0, 5.0, 5.0, -3.0, -3.0, -3.0, 0.0])
    assert float(listwise_softmax_loss(shifted, labels, group_ids)) == pytest.approx(float(loss), rel=1e-6)
    # stable where exp overflows
    assert torch.isfinite(listwise_softmax_loss(logits.detach() * 100, labels, group_ids))
    loss.backward()
    assert logits.grad[0] < 0 and logits.grad[1] > 0 and logits.grad[4] < 0 and logits.grad[5] > 0
    assert float(logits.grad[6]) == 0.0  # nothing to outscore


def test_listwise_training_ranks_the_positive_above_its_negatives(tiny_bert: Path) -> None:
    model, batch = _model_and_four_groups(tiny_bert)

    def evaluate() -> dict:
        model.eval()
        with torch.inference_mode():
            out = RerankEvaluator()(model, [batch])
        model.train()
        return out

    before = evaluate()
    metrics = fit_one_batch(CrossEncoderObjective(loss="listwise"), model, batch)
    after = evaluate()
    assert set(metrics) == {"listwise_loss"}
    assert after["listwise_loss"][0] < before["listwise_loss"][0] and after["listwise_loss"][1] == 4
    # the positive outscores (nearly) all of its group's negatives, which it did not before
    assert after["inbatch_pairwise_accuracy"][0] >= 7 > before["inbatch_pairwise_accuracy"][0]


def test_head_lr_gives_the_head_its_own_rate_in_the_optimizer(tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.objectives.cross_encoder.objective import build_recipe
    from lmplatform.objectives.run_config import load_run_config
    from lmplatform.train.optim import build_optimizer

    base = {"model": {"name_or_path": str(tiny_bert), "max_seq_length": 24}, "data": {"train_paths": [str(tmp_path / "p.jsonl")]},
            "objective": {"name": "cross_encoder", "head_lr": 1e-3}, "optim": {"lr": 2e-5}}
    recipe = build_recipe(load_run_config(None, base=base))
    names = {id(p): n for n, p in recipe.model.named_parameters()}
    rates = {n: g["lr"] for g in build_optimizer(recipe.parameters(), names, load_run_config(None, base=base).optim,
                                                  recipe.learning_rates).param_groups
             for n in [names[id(p)] for p in g["params"]]}
    head = set(recipe.model.head_parameter_names())
    assert len(head) == 4 and all(rates[n] == 1e-3 for n in head)
    assert all(rate == 2e-5 for n, rate in rates.items() if n not in head)
    base["objective"].pop("head_lr")
    assert build_recipe(load_run_config(None, base=base)).learning_rates == {}
