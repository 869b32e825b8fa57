import pytest
import torch
from transformers import AutoTokenizer

from lmplatform.models.masked_lm import IGNORE_INDEX
from lmplatform.models.resolve import packaged_model_path
from lmplatform.objectives.masking import DynamicMasker


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(packaged_model_path()))


def _batch(tokenizer, n: int = 64):
    texts = [" ".join(["server disk memory failure report"] * (1 + i % 5)) for i in range(n)]
    return tokenizer(texts, padding=True, return_tensors="pt")


def test_masking_statistics(tokenizer) -> None:
    batch = _batch(tokenizer, 256)
    masker = DynamicMasker(tokenizer)
    generator = torch.Generator().manual_seed(0)
    inputs, labels = masker(batch["input_ids"], batch["attention_mask"], generator=generator)
    maskable = masker.maskable(batch["input_ids"], batch["attention_mask"])
    selected = labels != IGNORE_INDEX
    rate = selected.sum().item() / maskable.sum().item()
    assert rate == pytest.approx(0.15, abs=0.01)
    to_mask = (inputs == tokenizer.mask_token_id) & selected
    unchanged = (inputs == batch["input_ids"]) & selected
    randomised = selected & ~to_mask & ~unchanged
    n = selected.sum().item()
    assert to_mask.sum().item() / n == pytest.approx(0.8, abs=0.03)
    assert unchanged.sum().item() / n == pytest.approx(0.1, abs=0.03)  # random draws rarely hit the same id
    assert randomised.sum().item() / n == pytest.approx(0.1, abs=0.03)
    assert torch.equal(labels[selected], batch["input_ids"][selected])
    assert torch.equal(inputs[~selected], batch["input_ids"][~selected])


def test_special_tokens_and_padding_are_never_masked(tokenizer) -> None:
    batch = _batch(tokenizer, 64)
    masker = DynamicMasker(tokenizer, mask_probability=0.9)
    special = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids)) | (batch["attention_mask"] == 0)
    for seed in range(5):
        inputs, labels = masker(batch["input_ids"], batch["attention_mask"], generator=torch.Generator().manual_seed(seed))
        assert (labels[special] == IGNORE_INDEX).all()
        assert torch.equal(inputs[special], batch["input_ids"][special])
        assert not torch.isin(inputs[~special & (inputs != tokenizer.mask_token_id)],
                              torch.tensor(tokenizer.all_special_ids)).any()


def test_masks_differ_between_batches(tokenizer) -> None:
    batch = _batch(tokenizer, 8)
    masker = DynamicMasker(tokenizer)
    _, first = masker(batch["input_ids"], batch["attention_mask"])
    _, second = masker(batch["input_ids"], batch["attention_mask"])
    assert not torch.equal(first, second)


def test_whole_word_masking_masks_all_subwords(tokenizer) -> None:
    texts = ["unbelievably misconfigured hyperparameterisation"] * 64
    features = tokenizer(texts, return_tensors="pt")
    word_ids = torch.tensor([[-1 if w is None else w for w in features.word_ids(i)] for i in range(len(texts))])
    masker = DynamicMasker(tokenizer, mask_probability=0.4, whole_word=True)
    _, labels = masker(features["input_ids"], features["attention_mask"], word_ids, torch.Generator().manual_seed(1))
    selected = labels != IGNORE_INDEX
    for row in range(len(texts)):
        for word in word_ids[row].unique():
            if word < 0:
                continue
            positions = selected[row][word_ids[row] == word]
            assert positions.all() or not positions.any()
    assert selected.any()


def test_tiny_batch_always_predicts_something(tokenizer) -> None:
    batch = tokenizer(["ok"], return_tensors="pt")
    masker = DynamicMasker(tokenizer, mask_probability=0.01)
    for seed in range(10):
        _, labels = masker(batch["input_ids"], batch["attention_mask"], generator=torch.Generator().manual_seed(seed))
        assert (labels != IGNORE_INDEX).sum() >= 1
