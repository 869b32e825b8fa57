import pytest
import torch

from lmplatform.models.pooling import pool


def test_padding_never_contributes() -> None:
    tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert torch.allclose(pool(tokens, mask, "mean"), torch.tensor([[2.0, 3.0]]))
    assert torch.allclose(pool(tokens, mask, "max"), torch.tensor([[3.0, 4.0]]))
    assert torch.allclose(pool(tokens, mask, "cls"), torch.tensor([[1.0, 2.0]]))


def test_max_with_negative_values_ignores_padding_zeros() -> None:
    tokens = torch.tensor([[[-5.0], [-3.0], [0.0]]])
    assert pool(tokens, torch.tensor([[1, 1, 0]]), "max").item() == -3.0


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="allowed: mean, cls, max"):
        pool(torch.zeros(1, 1, 1), torch.ones(1, 1), "sum")  # type: ignore[arg-type]
