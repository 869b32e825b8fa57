"""The OpenVINO backend: the same vectors as torch fp32, static int8 close to them, the export folder's round trip
(OpenVINO alone, sentence-transformers' pooling over the token output, `lmp export`), and a clear error without
the extra."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lmplatform.models.encoder import Encoder
from lmplatform.models.export import ExportError, export_model
from lmplatform.models.openvino_backend import (
    MissingExtra,
    OpenVinoModelConfig,
    quantize_openvino,
    read_calibration_texts,
)
from tests.models.test_export import TEXTS

CALIBRATION = [f"{a} {b} after the update" for a in ("printer", "disk", "login", "vpn", "invoice") for b in
               ("queue stuck", "quota exceeded", "times out", "tunnel down", "totals wrong", "crashes on start")]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_openvino_encoder_gives_the_torch_vectors(tiny_bert: Path, tmp_path: Path, pooling: str) -> None:
    folder = Encoder.from_pretrained(tiny_bert, pooling=pooling, max_seq_length=24).save_pretrained(tmp_path / "m")
    reference = Encoder.from_pretrained(folder).encode(TEXTS)
    on_load = Encoder.from_pretrained(folder, backend="openvino")  # any model folder: converted when loaded
    assert (on_load.backend, on_load.dim, on_load.pooling, on_load.quantized) == ("openvino", 32, pooling, False)
    vectors = on_load.encode(TEXTS, batch_size=2)
    assert _cosines(vectors, reference).min() >= 0.999 and np.abs(vectors - reference).max() < 1e-4
    bf16 = on_load.encode(TEXTS, precision="bf16")
    assert _cosines(bf16, reference).min() > 0.99 and bf16.dtype == np.float32
    with pytest.raises(ValueError, match="fp16' needs a CUDA device"):
        on_load.encode(TEXTS, precision="fp16")
    with pytest.raises(ValueError, match="normalize=False"):
        on_load.encode(TEXTS, normalize=False)


def test_an_openvino_encoder_is_freed_once_dropped(tiny_bert: Path, tmp_path: Path) -> None:
    # A served model that a newer release replaces must give its memory back: nothing the runtime keeps after an
    # encode (the infer requests of batches in flight) may hold on to the model, and dropping it must not hang.
    import gc
    import weakref

    folder = Encoder.from_pretrained(tiny_bert, max_seq_length=24).save_pretrained(tmp_path / "m")
    encoder = Encoder.from_pretrained(folder, backend="openvino")
    encoder.encode(TEXTS, batch_size=2)  # several batches: in flight
    encoder.encode(TEXTS[:1])  # one batch: a single request
    session = weakref.ref(encoder.graph)
    del encoder
    gc.collect()
    assert session() is None


def test_openvino_export_round_trip(tiny_bert: Path, tmp_path: Path) -> None:
    import openvino as ov
    import torch
    from sentence_transformers.models import Normalize, Pooling

    folder = Encoder.from_pretrained(tiny_bert, pooling="mean", max_seq_length=24).save_pretrained(tmp_path / "m")
    reference = Encoder.from_pretrained(folder).encode(TEXTS)
    result = export_model(folder, "openvino", tmp_path / "ov")
    config = OpenVinoModelConfig.read(result.folder)
    assert (config.pooling, config.normalized, config.quantization, config.max_seq_length) == ("mean", True, None, 24)
    loaded = Encoder.from_pretrained(result.folder, backend="openvino")
    assert np.abs(loaded.encode(TEXTS) - reference).max() < 1e-4

    # OpenVINO and the tokenizer alone: the graph pools and normalises ...
    tokens = loaded.tokenizer(TEXTS, padding=True, truncation=True, max_length=24, return_tensors="np")
    model = ov.Core().compile_model(str(result.folder / config.file), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs = model({name: tokens[name].astype(np.int64) for name in config.inputs})
    assert np.abs(outputs[config.output] - reference).max() < 1e-4
    # ... and its token output pooled by the modules the folder names gives them too: what sentence-transformers'
    # backend="openvino" computes (its loader, optimum-intel, does not install beside transformers 5.24).
    modules = json.loads((result.folder / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Normalize"]
    features = {"token_embeddings": torch.from_numpy(outputs[config.token_output]),
                "attention_mask": torch.from_numpy(tokens["attention_mask"])}
    pooled = Normalize()(Pooling.load(str(result.folder / "1_Pooling"))(features))["sentence_embedding"].numpy()
    assert np.abs(pooled - reference).max() < 1e-4
    with pytest.raises(ValueError, match="backend='openvino'"):
        Encoder.from_pretrained(result.folder)  # a graph, no PyTorch weights


def test_openvino_int8_is_static_and_stays_close(tiny_bert: Path, tmp_path: Path) -> None:
    import openvino as ov

    reference = Encoder.from_pretrained(tiny_bert).encode(TEXTS)
    with pytest.raises(ExportError, match="calibration texts"):
        export_model(tiny_bert, "openvino-int8", tmp_path / "none")
    result = export_model(tiny_bert, "openvino-int8", tmp_path / "int8", calibration=CALIBRATION,
                          keep_fp32=["encoder.layer.0.output.dense"])
    config = OpenVinoModelConfig.read(result.folder)
    assert config.quantization == "int8" and config.calibration["texts"] == len(CALIBRATION)
    assert config.keep_fp32 == ["encoder.layer.0.output.dense"]
    model = ov.Core().read_model(str(result.folder / config.file))
    quantizers = [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]
    assert len(quantizers) >= 8, quantizers  # activations quantized: static int8, not weights only
    assert not [q for q in quantizers if "layer.0.output.dense" in q], "a kept layer was quantized"

    int8 = Encoder.from_pretrained(result.folder, backend="openvino")
    assert int8.quantized and int8.backend == "openvino"
    # MiniLM's int8 stays within the dev tolerance (docs/benchmarks.md); a tiny random BERT is held to the ONNX bar.
    assert _cosines(int8.encode(TEXTS), reference).min() > 0.98
    with pytest.raises(ValueError, match="calibration texts"):
        Encoder.from_pretrained(tiny_bert, backend="openvino", quantize="int8")
    with pytest.raises(ValueError, match="no MatMul of"):
        quantize_openvino(export_model(tiny_bert, "openvino", tmp_path / "fp32").folder, CALIBRATION, tmp_path / "bad",
                          keep_fp32=["encoder.layer.9.output.dense"])


def test_a_missing_openvino_names_the_extra(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # what an environment without the extra imports
    with pytest.raises(MissingExtra, match=r"pip install 'lmplatform\[openvino\]'"):
        Encoder.from_pretrained(tiny_bert, backend="openvino")
    from lmplatform.cli import app

    done = CliRunner().invoke(app, ["export", "--model", str(tiny_bert), "--format", "openvino", "--out", str(tmp_path / "o")])
    assert done.exit_code == 2 and "lmplatform[openvino]" in done.output, done.output


def test_lmp_export_openvino_int8_reads_the_calibration_file(tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.cli import app

    calibration = tmp_path / "dev.jsonl"
    rows = [{"title": t, "description": "seen on the dev server"} for t in CALIBRATION] + [{"title": ""}]
    calibration.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert read_calibration_texts(calibration) == ([f"{t}. seen on the dev server" for t in CALIBRATION], 1)
    runner = CliRunner()
    done = runner.invoke(app, ["export", "--model", str(tiny_bert), "--format", "openvino-int8", "--out", str(tmp_path / "o"),
                               "--calibration", str(calibration)])
    assert done.exit_code == 0, done.output
    assert "1 empty rows skipped" in done.output and "backend='openvino'" in done.output
    assert OpenVinoModelConfig.read(tmp_path / "o").calibration["texts"] == len(CALIBRATION)
    unpaired = runner.invoke(app, ["export", "--model", str(tiny_bert), "--format", "openvino-int8",
                                   "--out", str(tmp_path / "u")])
    assert unpaired.exit_code == 2 and "--calibration FILE goes with --format openvino-int8" in unpaired.output
    (tmp_path / "bad.jsonl").write_text('{"title": "ok"}\nnot json\n')
    bad = runner.invoke(app, ["export", "--model", str(tiny_bert), "--format", "openvino-int8", "--out", str(tmp_path / "b"),
                              "--calibration", str(tmp_path / "bad.jsonl")])
    assert bad.exit_code == 2 and "bad.jsonl:2: not JSON" in bad.output, bad.output
