"""The DeCLUTR collator, loss and evaluator on a tiny BERT."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lmplatform.objectives.declutr.objective import DeclutrCollator, DeclutrEvaluator, DeclutrObjective
from lmplatform.objectives.declutr.spans import DeclutrSpanSampler
from lmplatform.objectives.infonce import Temperature
from lmplatform.train.collate import pad_multiple


@pytest.fixture(scope="module")
def tiny_mlm(tiny_bert: Path):
    from transformers import AutoTokenizer

    from lmplatform.models.masked_lm import MaskedLanguageModel

    return MaskedLanguageModel.from_pretrained(tiny_bert), AutoTokenizer.from_pretrained(str(tiny_bert))


def _texts(n: int, words: int, seed: int = 0) -> list[str]:
    from tests.conftest import TOKEN_WORDS

    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(TOKEN_WORDS, size=words)) for _ in range(n)]


def test_collator_builds_anchor_then_positive_spans_and_skips_short_documents(tiny_mlm) -> None:
    _, tokenizer = tiny_mlm
    sampler = DeclutrSpanSampler(num_anchors=2, num_positives=2, min_span=3, max_span=6)
    collator = DeclutrCollator(tokenizer, sampler, seed=3)
    texts = _texts(3, 40) + ["printer crash"]
    batch = collator({"text": np.array(texts, dtype=object)})
    assert collator.dropped == 1
    rows = 3 * 2 * (1 + 2)
    lengths = batch["attention_mask"].sum(1)
    assert batch["input_ids"].shape[0] == rows
    padded_to = pad_multiple() or 1
    assert batch["input_ids"].shape[1] == -(-int(lengths.max()) // padded_to) * padded_to
    assert bool(((lengths >= 3 + 2) & (lengths <= 6 + 2)).all())  # span + [CLS]/[SEP]
    assert bool((batch["input_ids"][:, 0] == tokenizer.cls_token_id).all())
    # seeded: the same seed draws the same spans
    again = DeclutrCollator(tokenizer, sampler, seed=3)({"text": np.array(texts, dtype=object)})
    assert torch.equal(again["input_ids"], batch["input_ids"])
    with collator.fixed_spans(5):
        first = collator.collate_texts(texts)
    with collator.fixed_spans(5):
        second = collator.collate_texts(texts)
    assert torch.equal(first["input_ids"], second["input_ids"])
    with pytest.raises(ValueError, match="no document in this batch"):
        collator.collate_texts(["too short"])


def test_declutr_loss_is_finite_logs_its_parts_and_decreases(tiny_mlm) -> None:
    from lmplatform.objectives.masking import DynamicMasker

    model, tokenizer = tiny_mlm
    torch.manual_seed(0)
    sampler = DeclutrSpanSampler(num_anchors=2, num_positives=1, min_span=4, max_span=8)
    collator = DeclutrCollator(tokenizer, sampler, seed=0)
    objective = DeclutrObjective(DynamicMasker(tokenizer), Temperature(0.1, learnable=True), 1, 1.0, 0.5)
    with collator.fixed_spans(0):
        batch = collator.collate_texts(_texts(8, 48, seed=1))
    params = list(model.parameters()) + list(objective.parameters())
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    losses = []
    for _ in range(12):
        loss, metrics = objective(model, batch)
        assert torch.isfinite(loss)
        assert set(metrics) >= {"contrastive_loss", "mlm_loss", "temperature", "inbatch_accuracy"}
        assert float(loss.detach()) == pytest.approx(float(metrics["mlm_loss"] + 0.5 * metrics["contrastive_loss"]), rel=1e-4)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(metrics["contrastive_loss"]))
    assert losses[-1] < losses[0]
    assert float(metrics["temperature"]) != pytest.approx(0.1)  # τ is learned

    evaluator = DeclutrEvaluator(objective, collator)
    texts = _texts(6, 48, seed=2)
    first = evaluator(model, (collator.collate_texts(texts[i:i + 3]) for i in (0, 3)))
    second = evaluator(model, (collator.collate_texts(texts[i:i + 3]) for i in (0, 3)))
    assert first == second  # fixed spans and masks: validation is comparable across evaluations
    assert first["contrastive_loss"][1] == 12 and first["mlm_loss"][1] > 0
