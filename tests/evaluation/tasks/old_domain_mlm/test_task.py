"""The old-domain MLM loss: fixed masks make it reproducible; a backbone-only folder borrows a head or fails."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmplatform.evaluation.tasks.old_domain_mlm.task import old_domain_mlm_loss


def test_old_domain_mlm_loss_is_reproducible_and_borrows_a_head(tiny_bert: Path, tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    texts = ["printer crash after restart", "vpn tunnel certificate expired", "database login timeout error"] * 3
    first = old_domain_mlm_loss(tiny_bert, texts, batch_size=4, max_seq_length=32)
    again = old_domain_mlm_loss(tiny_bert, texts, batch_size=4, max_seq_length=32)
    assert first["mlm_loss"] == again["mlm_loss"] > 0  # fixed masks
    assert first["texts"] == 9 and first["masked_tokens"] >= 3  # at least one per batch

    # a bi-encoder style export: backbone only
    backbone_dir = tmp_path / "backbone"
    AutoModel.from_pretrained(str(tiny_bert)).save_pretrained(str(backbone_dir))
    AutoTokenizer.from_pretrained(str(tiny_bert)).save_pretrained(str(backbone_dir))
    with pytest.raises(ValueError, match="has no MLM head"):
        old_domain_mlm_loss(backbone_dir, texts)
    borrowed = old_domain_mlm_loss(backbone_dir, texts, mlm_head_from=tiny_bert, batch_size=4, max_seq_length=32)
    assert borrowed["mlm_loss"] == pytest.approx(first["mlm_loss"], rel=1e-5)  # same weights, same head
