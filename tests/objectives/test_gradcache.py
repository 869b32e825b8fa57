"""GradCache across 2 workers: with the gather of keys and hard negatives (here on one worker only), uneven
shards and a learnable temperature, each worker's loss and the averaged gradients are plain InfoNCE's.

The encoder is a small bag-of-words model (no transformers import in the spawned workers);
tests/objectives/biencoder/test_cached.py checks GradCache on a BERT with dropout.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from lmplatform.objectives.gradcache import cached_info_nce
from lmplatform.objectives.infonce import Temperature, info_nce

VOCAB, DIM, ROWS, WIDTH = 40, 8, 5, 6
CUT = 3  # rank 0 holds rows 0-2, rank 1 rows 3-4: uneven shards exercise the gather's padding


class BagOfWords(nn.Module):
    """Mean of the unmasked tokens' vectors, then a linear map."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(VOCAB, DIM)
        self.linear = nn.Linear(DIM, DIM)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).float()
        return self.linear((self.embedding(input_ids) * mask).sum(1) / mask.sum(1))


def _texts(seed: int, rows: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(rows, WIDTH, dtype=torch.long)
    mask[:, WIDTH // 2:] = torch.randint(0, 2, (rows, WIDTH - WIDTH // 2), generator=generator)
    return {"input_ids": torch.randint(0, VOCAB, (rows, WIDTH), generator=generator), "attention_mask": mask}


QUERIES, KEYS, NEGATIVES = _texts(1, ROWS), _texts(2, ROWS), _texts(3, 2)  # both negatives live on rank 0


def _averaged_gradients(model: BagOfWords, temperature: Temperature) -> dict[str, torch.Tensor]:
    """Every parameter's gradient averaged over the workers, as the loop all-reduces them; the gradients are reset."""
    grads = {}
    for name, param in [*model.named_parameters(), ("log_tau", temperature.log_tau)]:
        grads[name] = param.grad.clone()
        dist.all_reduce(grads[name])
        grads[name] /= dist.get_world_size()
        param.grad = None
    return grads


def _worker(rank: int, store: str, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        rows = slice(0, CUT) if rank == 0 else slice(CUT, ROWS)
        queries, keys = ({k: v[rows] for k, v in texts.items()} for texts in (QUERIES, KEYS))
        negatives = NEGATIVES if rank == 0 else {k: v[:0] for k, v in NEGATIVES.items()}
        model, temperature = BagOfWords(), Temperature(0.2, learnable=True)

        plain = info_nce(model(**queries), model(**keys), temperature(), symmetric=True, hard_negatives=model(**negatives))
        (plain.loss / 4).backward()  # a quarter, as with 4 accumulation steps: GradCache scales its gradients alike
        expected = _averaged_gradients(model, temperature)
        cached = cached_info_nce(model, queries, keys, temperature(), mini_batch_size=2, symmetric=True,
                                 hard_negatives=negatives)
        (cached.loss / 4).backward()
        out[rank] = (float(plain.loss), float(cached.loss), expected, _averaged_gradients(model, temperature))
    finally:
        dist.destroy_process_group()
    # torch's gloo threads sometimes abort the interpreter's teardown, after the results are out
    # (see tests/objectives/test_infonce.py).
    os._exit(0)


def test_gradcache_on_two_workers_matches_plain_infonce(tmp_path: Path) -> None:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
        results = dict(out)
    for rank in (0, 1):
        plain_loss, cached_loss, expected, got = results[rank]
        assert cached_loss == pytest.approx(plain_loss, rel=1e-6)
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7, msg=f"rank {rank}: {name}")
