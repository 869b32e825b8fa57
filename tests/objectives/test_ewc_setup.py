"""The `ewc:` block wiring: a Fisher file computed from a corpus, and the penalty attached to any recipe."""
from __future__ import annotations

from pathlib import Path

import torch

from lmplatform.config import load_run_config
from lmplatform.objectives.ewc import EWCPenalty, FisherDiagonal
from lmplatform.objectives.ewc_setup import attach_ewc, compute_fisher_file
from lmplatform.objectives.mlm_recipe import build_mlm_recipe


def test_fisher_file_from_a_corpus_then_penalty_on_the_recipe(tiny_bert: Path, corpus_file: Path, tmp_path: Path) -> None:
    cfg = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", f"data.train_paths={corpus_file}"])
    out = tmp_path / "fisher.safetensors"
    meta = compute_fisher_file(str(tiny_bert), cfg.data, str(out), samples=6, batch_size=2, max_seq_length=32)
    assert meta["gradients"] == 3 and meta["examples"] == 6 and meta["source_model"] == str(tiny_bert)
    assert FisherDiagonal.load(out).metadata["data"] == [str(corpus_file)]

    with_ewc = load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32",
                                      f"data.train_paths={corpus_file}", f"ewc.fisher_path={out}", "ewc.lambda=100"])
    recipe = build_mlm_recipe(with_ewc)
    report = attach_ewc(with_ewc, recipe)
    (penalty,) = recipe.regularizers
    assert isinstance(penalty, EWCPenalty) and report.matched_tensors == report.model_tensors
    assert float(penalty(recipe.model)[0].detach()) == 0.0  # θ* defaults to the starting model
    with torch.no_grad():
        next(recipe.model.parameters()).add_(1.0)
    assert float(penalty(recipe.model)[0].detach()) > 0.0
    assert attach_ewc(cfg, build_mlm_recipe(cfg)) is None  # no ewc block, no regularizer
