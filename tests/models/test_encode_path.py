"""`backend: auto` (models/encode_path.py): which paths it times on which CPU, that the fastest wins, and that the
choice is cached per host and model. A fake timer feeds it: no timing runs here."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lmplatform.models.encode_path import EncodePath, candidate_paths, choose_path, host_class

ALL = {"torch", "onnx", "openvino"}
AVX2 = {"avx2"}
ZEN4 = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_int8", "amx_bf16"}


def labels(paths: list[EncodePath]) -> list[str]:
    return [p.label for p in paths]


def test_candidates_follow_the_cpu_the_runtimes_and_the_options() -> None:
    assert labels(candidate_paths(AVX2, ALL, tuple(ALL), int8=True, calibrated=False)) == [
        "torch fp32", "onnx fp32", "onnx int8", "openvino fp32"]  # no bf16 where it is emulated
    assert labels(candidate_paths(ZEN4, ALL, tuple(ALL), int8=True, calibrated=True)) == [
        "torch fp32", "torch bf16", "onnx fp32", "onnx int8", "openvino fp32", "openvino bf16", "openvino int8",
        "openvino int8 bf16"]
    assert labels(candidate_paths(ZEN4, ALL, tuple(ALL), int8=False, calibrated=True)) == [
        "torch fp32", "torch bf16", "onnx fp32", "openvino fp32", "openvino bf16"]
    assert labels(candidate_paths(AVX2, {"torch", "onnx"}, tuple(ALL), int8=True, calibrated=True)) == [
        "torch fp32", "onnx fp32", "onnx int8"]  # openvino not installed
    assert labels(candidate_paths(AVX2, ALL, ("onnx",), int8=True, calibrated=False)) == ["onnx fp32", "onnx int8"]
    assert [host_class(f) for f in (set(), AVX2, {"avx2", "avx512_vnni"}, ZEN4, SAPPHIRE_RAPIDS)] == [
        "other", "avx2", "avx512_vnni", "avx512_bf16", "amx"]


class FakeTimer:
    """Seconds per batch by path; records which paths it timed."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds, self.timed = seconds, []

    def __call__(self, encoder, texts: list[str], batch_size: int) -> float:
        label = f"{encoder.backend} {'int8' if encoder.quantized else encoder.precision}"
        label += f" {encoder.precision}" if encoder.quantized and encoder.precision != "fp32" else ""
        self.timed.append(label)
        assert len(texts) % batch_size == 0 and len(encoder.tokenizer(texts[0])["input_ids"]) > encoder.max_seq_length
        return self.seconds[label]


def test_the_fastest_path_wins_and_is_cached_per_host_and_model(tiny_bert: Path, tmp_path: Path) -> None:
    cache = tmp_path / "encode_paths.json"
    timer = FakeTimer({"torch fp32": 0.30, "onnx fp32": 0.25, "onnx int8": 0.12, "openvino fp32": 0.20})
    choice, encoder = choose_path(tiny_bert, cache=cache, timer=timer, features=AVX2, batch_size=4)
    assert choice.path == EncodePath("onnx", "int8") and encoder.backend == "onnx" and encoder.quantized
    assert timer.timed == ["torch fp32", "onnx fp32", "onnx int8", "openvino fp32"] and not choice.cached
    assert choice.summary()["ms_per_batch"] == {"torch fp32": 300.0, "onnx fp32": 250.0, "onnx int8": 120.0,
                                                "openvino fp32": 200.0}
    assert choice.host == "avx2"

    # the same host and model again: the cached choice, nothing timed
    again = FakeTimer({})
    choice, encoder = choose_path(tiny_bert, cache=cache, timer=again, features=AVX2, batch_size=4)
    assert choice.path == EncodePath("onnx", "int8") and choice.cached and again.timed == [] and encoder.quantized
    assert encoder.encode(["printer jams"]).shape == (1, 32)

    # without int8 the cached choice is no candidate: timed again, among the others
    timer = FakeTimer({"torch fp32": 0.30, "onnx fp32": 0.25, "openvino fp32": 0.20})
    choice, _ = choose_path(tiny_bert, cache=cache, timer=timer, int8=False, features=AVX2, batch_size=4)
    assert choice.path == EncodePath("openvino") and len(timer.timed) == 3

    # another model (a copy whose files differ): timed again; both choices stay in the cache
    other = tmp_path / "other"
    shutil.copytree(tiny_bert, other)
    (other / "lmplatform_encoder.json").write_text(json.dumps({"pooling": "cls", "max_seq_length": 64}))
    timer = FakeTimer({"torch fp32": 0.10, "onnx fp32": 0.25, "onnx int8": 0.12, "openvino fp32": 0.20})
    choice, _ = choose_path(other, cache=cache, timer=timer, features=AVX2, batch_size=4)
    assert choice.path == EncodePath("torch") and len(timer.timed) == 4
    assert len(json.loads(cache.read_text())) == 3


def test_no_backend_to_choose_from_is_refused_naming_the_field(tiny_bert: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from lmplatform.models import encode_path

    monkeypatch.setattr(encode_path, "installed_backends", lambda: {"torch"})
    with pytest.raises(ValueError, match=r"encoder.backend 'auto' has no backend to choose from: of onnx, openvino, "
                                         r"installed: none"):
        choose_path(tiny_bert, backends=("onnx", "openvino"), cache=tmp_path / "c.json", timer=FakeTimer({}),
                    features=AVX2)
