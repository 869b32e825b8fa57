"""Model folders for tools outside lmplatform: sentence-transformers, TEI/Infinity, ONNX Runtime.

`export_model(model, format, out)`:
- `sentence-transformers`, bi-encoder: the Hugging Face folder plus `modules.json`,
  `sentence_bert_config.json` (max_seq_length), `1_Pooling/config.json` with the encoder's own
  pooling and `2_Normalize` (our vectors are L2-normalised). Without these files
  sentence-transformers (and TEI) guess mean pooling, silently wrong for a CLS- or max-pooled model.
  The classic file format is written (the one the Hub's sentence-transformers models carry and
  TEI reads); current sentence-transformers reads it too.
- `sentence-transformers`, cross-encoder (a one-logit sequence classifier): the Hugging Face folder
  with its sigmoid activation and maximum length recorded, as sentence-transformers' `CrossEncoder`
  reads them, so its `predict` gives `CrossEncoder.score`'s probabilities.
- `onnx` / `onnx-int8`, bi-encoder: the graph of `onnx_backend` (pooling and normalisation
  inside) with the tokenizer, loadable by ONNX Runtime alone or by `Encoder(backend="onnx")`.
- `openvino` / `openvino-int8`, bi-encoder: the folder of `openvino_backend` (the graph with both the
  sentence embedding and the token embeddings, plus the sentence-transformers module files), loadable by
  OpenVINO alone, by `Encoder(backend="openvino")` and by sentence-transformers' `backend="openvino"`
  where its optimum-intel installs. int8 is static: it needs calibration texts of the served domain.
A classifier folder (encoder + MLP head) exports its encoder; the head is not part of any format.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional, Sequence

from lmplatform.models.kind import CROSS_ENCODER, ENCODER, ModelKind
from lmplatform.models.onnx_backend import export_onnx, quantize_onnx
from lmplatform.models.openvino_backend import OPENVINO_KEEP_FP32, export_openvino, quantize_openvino
from lmplatform.models.resolve import resolve_model_path
from lmplatform.models.sentence_transformers_layout import write_sentence_transformers_modules

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

ExportFormat = Literal["sentence-transformers", "onnx", "onnx-int8", "openvino", "openvino-int8"]
FORMATS: tuple[str, ...] = ("sentence-transformers", "onnx", "onnx-int8", "openvino", "openvino-int8")
_SIGMOID = "torch.nn.modules.activation.Sigmoid"


class ExportError(ValueError):
    """The model cannot be exported in the requested format (the message says why)."""


@dataclass
class ExportResult:
    format: str
    kind: ModelKind
    folder: Path
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        note = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.kind} exported as {self.format} to {self.folder}: {len(self.files)} files{note}"


def model_kind(folder: Path) -> ModelKind:
    """A one-logit sequence classifier is a cross-encoder; anything else is read as an encoder (a bi-encoder's)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    architectures = config.get("architectures") or []
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    if any(a.endswith("ForSequenceClassification") for a in architectures) and labels == 1:
        return CROSS_ENCODER
    return ENCODER


def export_model(model: str | Path, fmt: ExportFormat, out: str | Path, keep_fp32: Optional[Sequence[str]] = None,
                 cross_encoder_max_length: int = 256, calibration: Optional[Sequence[str]] = None) -> ExportResult:
    """Export `model` (a folder, 'default' or a models:/ or runs:/ URI) as `fmt` into `out` (created; must be empty).

    calibration: texts of the served domain for `openvino-int8` (required there, unused elsewhere).
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "openvino-int8" and not calibration:
        raise ExportError("openvino-int8 is static int8: it needs calibration texts of the served domain "
                          "(lmp export --calibration FILE)")
    source = resolve_model_path(str(model))
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder; choose a new --out")
    kind = model_kind(source)
    if kind == CROSS_ENCODER:
        if fmt != "sentence-transformers":
            raise ExportError(f"{fmt} exports bi-encoders (a graph ending in a sentence embedding); "
                              f"{source} is a cross-encoder: export it as sentence-transformers")
        return write_cross_encoder(source, out, cross_encoder_max_length)
    from lmplatform.models.encoder import KEEP_FP32_LINEARS, Encoder

    encoder = Encoder.from_pretrained(source)
    notes = ["the classifier head is not exported"] if (source / "classifier_head.pt").is_file() else []
    if fmt == "sentence-transformers":
        result = write_sentence_transformers(encoder, out)
    elif fmt.startswith("openvino"):
        result = write_openvino(encoder, out, calibration if fmt == "openvino-int8" else None,
                                OPENVINO_KEEP_FP32 if keep_fp32 is None else keep_fp32)
    else:
        result = write_onnx(encoder, out, int8=fmt == "onnx-int8",
                            keep_fp32=KEEP_FP32_LINEARS if keep_fp32 is None else keep_fp32)
    result.notes += notes
    return result


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def write_sentence_transformers(encoder: "Encoder", out: Path, normalize: bool = True) -> ExportResult:
    """`encoder` as a sentence-transformers folder (see the module doc)."""
    out = encoder.save_pretrained(out)  # backbone only, tokenizer, lmplatform_encoder.json
    write_sentence_transformers_modules(encoder, out, normalize)
    return ExportResult("sentence-transformers", ENCODER, out, _files(out),
                        [f"{encoder.pooling} pooling{', normalised' if normalize else ''}, "
                         f"max_seq_length {encoder.max_seq_length}"])


def write_cross_encoder(source: Path, out: Path, max_seq_length: int) -> ExportResult:
    """A cross-encoder folder that sentence-transformers' `CrossEncoder` loads with our scores."""
    from lmplatform.models.cross_encoder import CrossEncoder

    model = CrossEncoder.from_pretrained(source, max_seq_length)
    model.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    # sentence-transformers reads its settings from this key of config.json (v4 and later).
    config["sentence_transformers"] = {"activation_fn": _SIGMOID}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    # The truncation length CrossEncoder.score uses; sentence-transformers takes it from the tokenizer.
    tokenizer_config = out / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text()) if tokenizer_config.is_file() else {}
    settings["model_max_length"] = max_seq_length
    tokenizer_config.write_text(json.dumps(settings, indent=2))
    return ExportResult("sentence-transformers", CROSS_ENCODER, out, _files(out),
                        [f"sigmoid of one logit, max length {max_seq_length}"])


def write_onnx(encoder: "Encoder", out: Path, int8: bool, keep_fp32: Sequence[str] = ()) -> ExportResult:
    """`encoder` as an ONNX folder: the fp32 graph, or only its int8 variant."""
    if not int8:
        config = export_onnx(encoder, out)
        return ExportResult("onnx", ENCODER, out, _files(out), [f"{config.pooling} pooling and normalisation in the graph"])
    with tempfile.TemporaryDirectory(prefix="lmp-onnx-") as tmp:
        export_onnx(encoder, tmp)
        config = quantize_onnx(tmp, keep_fp32, out)
    kept = f"; kept in fp32: {', '.join(config.keep_fp32)}" if config.keep_fp32 else ""
    how = "fused by ONNX Runtime, MatMul and attention" if config.fused else "MatMul"
    return ExportResult("onnx-int8", ENCODER, out, _files(out),
                        [f"{config.pooling} pooling and normalisation in the graph, {how} weights int8 per "
                         f"{'channel' if config.per_channel else 'tensor'}{kept}"])


def write_openvino(encoder: "Encoder", out: Path, calibration: Optional[Sequence[str]], keep_fp32: Sequence[str] = ()
                   ) -> ExportResult:
    """`encoder` as an OpenVINO folder: fp32, or only its static int8 variant when `calibration` texts are given."""
    if calibration is None:
        config = export_openvino(encoder, out)
        return ExportResult("openvino", ENCODER, out, _files(out), [f"{config.pooling} pooling and normalisation "
                                                                          "in the graph, token embeddings beside"])
    with tempfile.TemporaryDirectory(prefix="lmp-openvino-") as tmp:
        export_openvino(encoder, tmp)
        config = quantize_openvino(tmp, calibration, out, keep_fp32)
    kept = f"; kept in higher precision: {', '.join(config.keep_fp32)}" if config.keep_fp32 else ""
    return ExportResult("openvino-int8", ENCODER, out, _files(out),
                        [f"{config.pooling} pooling and normalisation in the graph, static int8 calibrated on "
                         f"{config.calibration['texts']} texts{kept}"])
