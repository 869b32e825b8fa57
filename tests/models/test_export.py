"""Exports load in the tools they are for and give our numbers: sentence-transformers, its CrossEncoder, ONNX Runtime."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.models.encoder import Encoder
from lmplatform.models.export import ExportError, export_model, model_kind
from lmplatform.models.onnx_backend import OnnxGraphConfig

# One text longer than every max_seq_length used here, so truncation must agree too.
TEXTS = ["vpn tunnel down", "the nightly backup of the invoice database failed with a disk quota error " * 6,
         "x", "printer queue stuck after the driver update", "login"]


def _encoder_folder(tiny_bert: Path, tmp_path: Path, pooling: str, max_seq_length: int) -> Path:
    return Encoder.from_pretrained(tiny_bert, pooling=pooling, max_seq_length=max_seq_length).save_pretrained(
        tmp_path / f"encoder-{pooling}")


@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_sentence_transformers_loads_the_export_with_our_vectors(tiny_bert: Path, tmp_path: Path, pooling: str) -> None:
    from sentence_transformers import SentenceTransformer

    folder = _encoder_folder(tiny_bert, tmp_path, pooling, 24)
    result = export_model(folder, "sentence-transformers", tmp_path / "st")
    assert result.kind == "encoder"
    modules = json.loads((result.folder / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Normalize"]
    assert json.loads((result.folder / "1_Pooling" / "config.json").read_text())[f"pooling_mode_{pooling}" + (
        "_token" if pooling == "cls" else "_tokens")] is True
    assert json.loads((result.folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 24

    ours = Encoder.from_pretrained(folder).encode(TEXTS, batch_size=2)
    model = SentenceTransformer(str(result.folder), device="cpu")
    theirs = model.encode(TEXTS, batch_size=3, convert_to_numpy=True)
    assert model.max_seq_length == 24
    assert np.abs(theirs - ours).max() < 1e-5, np.abs(theirs - ours).max()
    # The export is still a folder lmplatform loads, with the same pooling.
    assert Encoder.from_pretrained(result.folder).pooling == pooling


def test_sentence_transformers_cross_encoder_gives_our_scores(tiny_bert: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    CrossEncoder.from_pretrained(tiny_bert, max_seq_length=40).save_pretrained(tmp_path / "ce")  # a new, seeded head
    assert model_kind(tmp_path / "ce") == "cross_encoder"
    result = export_model(tmp_path / "ce", "sentence-transformers", tmp_path / "st-ce", cross_encoder_max_length=40)
    assert result.kind == "cross_encoder"
    queries = ["disk full", "login fails", TEXTS[1]]
    documents = ["the backup disk is full", TEXTS[1], "invoice totals are wrong"]
    ours = CrossEncoder.from_pretrained(tmp_path / "ce", max_seq_length=40).score(queries, documents)
    theirs = STCrossEncoder(str(result.folder), device="cpu").predict(list(zip(queries, documents)), batch_size=2)
    assert np.abs(np.asarray(theirs) - ours).max() < 1e-5, (theirs, ours)
    assert len(set(np.round(ours, 6))) == 3  # three different scores: the comparison is not of constants
    with pytest.raises(ExportError, match="cross-encoder"):
        export_model(tmp_path / "ce", "onnx", tmp_path / "ce-onnx")


def test_onnx_export_holds_pooling_and_normalisation(tiny_bert: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    folder = _encoder_folder(tiny_bert, tmp_path, "cls", 32)
    reference = Encoder.from_pretrained(folder).encode(TEXTS)
    result = export_model(folder, "onnx", tmp_path / "onnx")
    graph = OnnxGraphConfig.read(result.folder)
    assert (graph.pooling, graph.normalized, graph.quantization) == ("cls", True, None)

    # ONNX Runtime and the tokenizer alone: no pooling code outside the graph.
    loaded = Encoder.from_pretrained(result.folder, backend="onnx")
    tokens = loaded.tokenizer(TEXTS, padding=True, truncation=True, max_length=32, return_tensors="np")
    session = ort.InferenceSession(str(result.folder / graph.file), providers=["CPUExecutionProvider"])
    raw = session.run([graph.output], {name: tokens[name].astype(np.int64) for name in graph.inputs})[0]
    assert np.abs(raw - reference).max() < 1e-5 and np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-5)

    assert loaded.backend == "onnx" and loaded.dim == 32 and not loaded.quantized
    assert np.abs(loaded.encode(TEXTS, batch_size=2) - reference).max() < 1e-5
    exported_on_load = Encoder.from_pretrained(folder, backend="onnx")  # any model folder: exported when loaded
    assert np.abs(exported_on_load.encode(TEXTS) - reference).max() < 1e-5
    with pytest.raises(ValueError, match="backend='onnx'"):
        Encoder.from_pretrained(result.folder)  # the folder holds a graph, no PyTorch weights
    with pytest.raises(ValueError, match="normalize=False"):
        loaded.encode(TEXTS, normalize=False)


def test_onnx_int8_stays_close_to_fp32(tiny_bert: Path, tmp_path: Path) -> None:
    reference = Encoder.from_pretrained(tiny_bert).encode(TEXTS)
    result = export_model(tiny_bert, "onnx-int8", tmp_path / "int8")
    graph = OnnxGraphConfig.read(result.folder)
    assert graph.quantization == "int8" and graph.keep_fp32 == ["encoder.layer.0.output.dense"]
    import onnx

    operators = {node.op_type for node in onnx.load(str(result.folder / graph.file)).graph.node}
    assert "MatMulInteger" in operators or "DynamicQuantizeMatMul" in operators, operators  # really int8
    assert graph.fused and graph.per_channel and "QAttention" in operators, operators  # a BERT: one fused op per layer
    unfused = export_model(tiny_bert, "onnx", tmp_path / "fp32")
    from lmplatform.models.onnx_backend import quantize_onnx

    plain = quantize_onnx(unfused.folder, ["encoder.layer.0.output.dense"], tmp_path / "int8-unfused", fuse=False)
    assert not plain.fused
    assert "QAttention" not in {n.op_type for n in onnx.load(str(tmp_path / "int8-unfused" / plain.file)).graph.node}
    with pytest.raises(ValueError, match="does not have"):
        quantize_onnx(unfused.folder, ["encoder.layer.9.output.dense"], tmp_path / "int8-bad")
    int8 = Encoder.from_pretrained(result.folder, backend="onnx")
    assert int8.quantized
    cosines = (int8.encode(TEXTS) * reference).sum(axis=1)
    assert cosines.min() > 0.98, cosines
    on_load = Encoder.from_pretrained(tiny_bert, backend="onnx", quantize="int8")
    assert np.abs(on_load.encode(TEXTS) - int8.encode(TEXTS)).max() < 1e-5  # the same quantization either way


def test_export_refuses_a_used_folder_and_unknown_formats(tiny_bert: Path, tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("x")
    with pytest.raises(ExportError, match="not an empty folder"):
        export_model(tiny_bert, "onnx", tmp_path / "used")
    with pytest.raises(ExportError, match="unknown format"):
        export_model(tiny_bert, "tflite", tmp_path / "new")  # type: ignore[arg-type]


def test_lmp_export_writes_the_folder_and_says_how_to_load_it(tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["export", "--model", str(tiny_bert), "--format", "onnx", "--out", str(tmp_path / "o")])
    assert done.exit_code == 0, done.output
    assert "backend='onnx'" in done.output and (tmp_path / "o" / "encoder.onnx").is_file()
    bad = runner.invoke(app, ["export", "--model", str(tiny_bert), "--format", "tflite", "--out", str(tmp_path / "t")])
    assert bad.exit_code == 2 and "allowed: sentence-transformers, onnx, onnx-int8, openvino, openvino-int8" in bad.output
    helped = " ".join(runner.invoke(app, ["export", "--help"], env={"COLUMNS": "400"}).output.split())
    assert "openvino-int8: for OpenVINO: a bi-encoder's static int8 graph, calibrated on domain texts" in helped
    unlogged = runner.invoke(app, ["export", "--model", str(tiny_bert), "--format", "onnx", "--out",
                                   str(tmp_path / "l"), "--log"])
    assert unlogged.exit_code == 2 and "--log needs a models:/ or runs:/ model" in unlogged.output
