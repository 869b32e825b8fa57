"""`MaskedLanguageModel`: the masked-only projection equals the full one; a missing head is initialised and tied."""

import torch

from lmplatform.models.masked_lm import FULL_PROJECTION_BYTES, IGNORE_INDEX, MaskedLanguageModel
from lmplatform.train.collate import TextCollator


def test_masked_projection_equals_full_projection(mlm_parts) -> None:
    tokenizer, model, masker = mlm_parts
    model.eval()
    batch = TextCollator(tokenizer, 32).encode(["disk full on the backup server", "login fails after reset"])
    inputs, labels = masker(batch["input_ids"], batch["attention_mask"], generator=torch.Generator().manual_seed(0))
    model.projection = "masked"
    masked = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)
    model.projection = "full"  # every position projected, the unmasked ones ignored by the loss
    full = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)
    assert torch.allclose(masked["loss"], full["loss"], atol=1e-5)
    assert int(masked["n_masked"]) == int(full["n_masked"]) == int((labels != IGNORE_INDEX).sum())
    assert int(masked["correct"]) == int(full["correct"])


def test_auto_projection_projects_every_position_off_the_cpu_while_the_logits_are_small(mlm_parts) -> None:
    model = mlm_parts[1]
    assert model.projection == "auto"
    words = model.mlm.config.vocab_size
    assert not model.projects_every_position(torch.zeros(32, 128, dtype=torch.long))
    assert model.projects_every_position(torch.zeros(32, 128, dtype=torch.long, device="meta"))
    too_many = FULL_PROJECTION_BYTES // (4 * words) + 1  # positions whose fp32 logits pass the budget
    assert not model.projects_every_position(torch.zeros(too_many, dtype=torch.long, device="meta"))


def test_missing_head_is_initialised_tied_and_logged(caplog) -> None:
    from lmplatform.models.resolve import packaged_model_path

    with caplog.at_level("WARNING"):
        model = MaskedLanguageModel.from_pretrained(packaged_model_path())
    assert "has no MLM head" in caplog.text and "tied to the input embeddings" in caplog.text
    assert model.mlm.get_output_embeddings().weight is model.mlm.get_input_embeddings().weight
