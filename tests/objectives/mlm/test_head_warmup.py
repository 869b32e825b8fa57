"""Head warm-up (`objective.freeze_encoder`): only the MLM head trains, the encoder stays bit-identical, and the
saved folder holds the trained head, so a later stage (init_from) or `mlm_head_from` reads it back."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Iterator

import pytest
import torch

from lmplatform.evaluation.tasks.old_domain_mlm.task import load_mlm_for_evaluation
from lmplatform.models.masked_lm import MaskedLanguageModel, untrained_mlm_head
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.run_config import load_run_config
from lmplatform.train.loop import FolderReporter, Trainer
from lmplatform.train.recipe import Batch
from lmplatform.train.state import FINAL_MODEL_DIR
from tests.conftest import text_batches


@pytest.fixture(scope="module")
def backbone_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT saved as a sentence encoder is shipped: the backbone, no MLM head (as the packaged MiniLM)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from lmplatform.models.resolve import packaged_model_path

    folder = tmp_path_factory.mktemp("backbone-only")
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=256)
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder



def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


@pytest.mark.parametrize("projection", ["masked", "full"])
def test_head_warmup_trains_the_head_alone_and_saves_it(backbone_only: Path, tmp_path: Path, projection: str) -> None:
    assert untrained_mlm_head(backbone_only), "the fixture must lack an MLM head"
    cfg = load_run_config(None, [f"model.name_or_path={backbone_only}", "model.max_seq_length=32",
                                 "data.train_paths=[unused.jsonl]", "objective.name=mlm", "objective.freeze_encoder=true",
                                 f"objective.projection={projection}", "objective.pseudo_perplexity_sentences=0",
                                 "optim.max_steps=4", "optim.lr=1e-2", "optim.warmup_steps=0",
                                 "tracking.log_every_n_steps=1", "checkpoint.every_n_steps=100"])
    recipe = objective_spec("mlm").build_recipe(cfg)
    model: MaskedLanguageModel = recipe.model
    encoder_before = _snapshot(model.backbone)
    head_before = _snapshot(model.head)

    # Only head tensors the encoder does not share are trained: not the decoder tied to the input embeddings.
    trained = recipe.parameters()
    head_ids = {id(p) for p in model.head.parameters()}
    assert trained and all(id(p) in head_ids for p in trained)
    assert all(not p.requires_grad for p in model.backbone.parameters())
    assert model.mlm.get_output_embeddings().weight is model.mlm.get_input_embeddings().weight

    reporter = FolderReporter(tmp_path / "checkpoints")
    trainer = Trainer(cfg, recipe, 4, torch.device("cpu"), 0, reporter=reporter)
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in trained}  # the frozen encoder is not in the optimizer
    trainer.begin(None)
    rng = random.Random(0)
    train, validation = text_batches(rng, 4, 8, (8, 16)), text_batches(rng, 2, 8, (8, 16))

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        return (recipe.collate(b) for b in train[skip:])

    trainer.model.train()
    assert not model.backbone.training  # a frozen encoder runs without dropout
    summary = trainer.fit(train_batches, lambda: (recipe.collate(b) for b in validation))

    assert trainer.progress.step == 4
    encoder_after = model.backbone.state_dict()
    assert encoder_before.keys() == encoder_after.keys()
    assert all(torch.equal(encoder_before[k], encoder_after[k]) for k in encoder_before), "the encoder moved"
    head_after = model.head.state_dict()
    changed = [k for k in head_before if not torch.equal(head_before[k], head_after[k])]
    assert "predictions.transform.dense.weight" in changed and "predictions.bias" in changed
    assert torch.equal(head_before["predictions.decoder.weight"], head_after["predictions.decoder.weight"])  # tied
    assert summary["val_mlm_loss"] < summary["val_mlm_loss_initial"]

    # The exported folder holds the trained head: a later stage and mlm_head_from load it as it was trained.
    folder = reporter.checkpoints[-1] / FINAL_MODEL_DIR
    assert untrained_mlm_head(folder) == []
    reloaded = MaskedLanguageModel.from_pretrained(folder)
    assert reloaded.untrained_head == ()
    for name, tensor in reloaded.mlm.state_dict().items():
        assert torch.equal(tensor, model.mlm.state_dict()[name]), name
    _, head_source = load_mlm_for_evaluation(folder)
    assert head_source == "own"


def test_freezing_a_model_without_a_known_head_is_refused(mlm_parts) -> None:
    _, model, _ = mlm_parts
    model.head = None
    with pytest.raises(ValueError, match="unknown MLM head layout"):
        model.freeze_encoder()
