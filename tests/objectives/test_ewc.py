"""EWC: the Fisher diagonal and the penalty, on a tiny BERT and on toy modules."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from lmplatform.objectives.ewc import EWCPenalty, FisherDiagonal, MLMFisherLoss, canonical_parameter_names
from lmplatform.objectives.ewc_setup import snapshot_parameters

TEXTS = ["printer crash after restart", "vpn tunnel certificate expired", "database login timeout error"]


@pytest.fixture(scope="module")
def mlm_parts(tiny_bert: Path):
    from lmplatform.models.encoder import load_tokenizer
    from lmplatform.models.masked_lm import MaskedLanguageModel
    from lmplatform.objectives.masking import DynamicMasker
    from lmplatform.train.collate import TextCollator

    tokenizer = load_tokenizer(tiny_bert)
    collate = TextCollator(tokenizer, 32)
    return MaskedLanguageModel.from_pretrained(tiny_bert), DynamicMasker(tokenizer), collate


def _mlm_fisher(mlm_parts) -> FisherDiagonal:
    model, masker, collate = mlm_parts
    batches = [collate.encode([t]) for t in TEXTS]
    return FisherDiagonal.compute(model, batches, MLMFisherLoss(masker, seed=3), metadata={"loss": "mlm"})


def test_fisher_is_the_mean_of_squared_per_example_gradients(mlm_parts) -> None:
    model, masker, collate = mlm_parts
    fisher = _mlm_fisher(mlm_parts)
    # the same masks, by hand
    loss_fn = MLMFisherLoss(masker, seed=3)
    model.eval()
    names = canonical_parameter_names(model)
    by_hand: dict[str, torch.Tensor] = {}
    for text in TEXTS:
        model.zero_grad()
        loss_fn(model, collate.encode([text])).backward()
        for name, p in model.named_parameters():
            by_hand[names[name]] = by_hand.get(names[name], 0) + p.grad.detach() ** 2 / len(TEXTS)
    assert fisher.metadata["gradients"] == 3 and fisher.metadata["examples"] == 3
    assert set(fisher.values) == set(by_hand)
    for key, value in fisher.values.items():
        assert torch.allclose(value, by_hand[key], rtol=1e-5, atol=1e-12), key
        assert (value >= 0).all()
    assert sum(float(v.sum()) for v in fisher.values.values()) > 0
    # backbone names are wrapper-free, heads are marked
    assert "encoder.layer.0.attention.self.query.weight" in fisher.values
    assert any(k.startswith("head:cls.predictions") for k in fisher.values)


def test_penalty_is_zero_at_anchor_and_its_gradient_is_lambda_f_delta(mlm_parts) -> None:
    model = copy.deepcopy(mlm_parts[0])
    fisher = _mlm_fisher(mlm_parts)
    penalty = EWCPenalty(model, fisher, snapshot_parameters(model), lambda_=1e4)
    value, metrics = penalty(model)
    assert float(value.detach()) == 0.0 and metrics["ewc_penalty"] == 0.0

    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    model.zero_grad()
    value, _ = penalty(model)
    value.backward()
    anchor = snapshot_parameters(mlm_parts[0])
    names = canonical_parameter_names(model)
    expected_value = 0.0
    for name, p in model.named_parameters():
        key = names[name]
        delta = p.detach() - anchor[key]
        assert torch.allclose(p.grad, 1e4 * fisher.values[key] * delta, rtol=1e-4, atol=1e-10), name
        expected_value += 0.5 * 1e4 * float((fisher.values[key] * delta**2).sum())
    assert float(value.detach()) == pytest.approx(expected_value, rel=1e-4)


def test_fisher_from_mlm_model_applies_to_encoder_and_leaves_new_params_alone(mlm_parts, tiny_bert: Path) -> None:
    from lmplatform.models.cross_encoder import CrossEncoder
    from lmplatform.models.encoder import Encoder

    fisher = _mlm_fisher(mlm_parts)
    anchor = snapshot_parameters(mlm_parts[0])
    for model, new_prefix in ((Encoder.from_pretrained(tiny_bert), "backbone.pooler"),
                              (CrossEncoder.from_pretrained(tiny_bert), "model.classifier")):
        penalty = EWCPenalty(model, fisher, anchor, lambda_=1e3)
        backbone = [n for n in canonical_parameter_names(model).values()
                    if not n.startswith("head:") and not n.startswith("pooler")]
        assert penalty.report.matched_tensors == len(backbone) > 0
        assert any(n.startswith(new_prefix) for n in penalty.report.unmatched_model)
        assert float(penalty(model)[0]) == 0.0  # same weights as θ*
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05)
        model.zero_grad()
        penalty(model)[0].backward()
        for name, p in model.named_parameters():
            if name.startswith(new_prefix):
                assert p.grad is None, f"{name} is new and must not be penalised"
            elif name in penalty.param_names:
                assert p.grad is not None


def test_no_match_is_a_clear_error(mlm_parts) -> None:
    fisher = _mlm_fisher(mlm_parts)
    with pytest.raises(ValueError, match="no parameter of the model matches"):
        EWCPenalty(nn.Linear(3, 2), fisher, {}, lambda_=1.0)


def test_large_lambda_keeps_parameters_near_the_anchor() -> None:
    def train(lambda_: float | None) -> float:
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        anchor = {k: v.detach().clone() for k, v in snapshot_parameters(model).items()}
        fisher = FisherDiagonal({k: torch.ones_like(v) for k, v in anchor.items()})
        penalty = EWCPenalty(model, fisher, anchor, lambda_) if lambda_ else None
        x = torch.randn(64, 4)
        y = x @ torch.tensor([[3.0], [-2.0], [1.0], [4.0]]) + 5.0  # a new task far from the start
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(20):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            if penalty is not None:
                loss = loss + penalty(model)[0]
            loss.backward()
            optimizer.step()
        return sum(float(((p.detach() - anchor["head:" + n]) ** 2).sum()) for n, p in model.named_parameters()) ** 0.5

    free, held = train(None), train(10.0)
    assert held < 0.2 * free


def test_save_load_roundtrip_and_mlflow_artifact(mlm_parts, tmp_path: Path, mlflow_uri: str) -> None:
    from lmplatform.tracking.mlflow_tracking import TrackedRun

    fisher = _mlm_fisher(mlm_parts)
    path = fisher.save(tmp_path / "fisher.safetensors")
    loaded = FisherDiagonal.load(path)
    assert loaded.metadata == fisher.metadata and loaded.metadata["loss"] == "mlm"
    assert all(torch.equal(loaded.values[k], v) for k, v in fisher.values.items())

    uri = mlflow_uri
    run = TrackedRun.start(uri, "tests", "fisher")
    artifact = fisher.log_to_mlflow(run, path)
    run.finish()
    for reference in (artifact, f"runs:/{run.run_id}/ewc/fisher.safetensors"):
        again = FisherDiagonal.load(reference, tracking_uri=uri)
        assert again.metadata["gradients"] == 3
    with pytest.raises(FileNotFoundError, match="no Fisher file"):
        FisherDiagonal.load(tmp_path / "missing.safetensors")
