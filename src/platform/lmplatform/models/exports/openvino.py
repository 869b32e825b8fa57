"""`openvino` and `openvino-int8`: a bi-encoder as the folder of `openvino_backend` (the graph with both the sentence
embedding and the token embeddings, plus the sentence-transformers module files), loadable by OpenVINO alone, by
`Encoder(backend="openvino")` and by sentence-transformers' `backend="openvino"` where its optimum-intel installs.
int8 is static: it needs calibration texts of the served domain."""
from __future__ import annotations

import tempfile
from pathlib import Path

from lmplatform.models.export_spec import ExportFormatSpec, ExportOptions, ExportResult, folder_files, load_encoder
from lmplatform.models.kind import ModelKind


def write_fp32(source: Path, kind: ModelKind, out: Path, options: ExportOptions) -> ExportResult:
    from lmplatform.models.openvino_backend import export_openvino

    config = export_openvino(load_encoder(source), out)
    return ExportResult("openvino", kind, out, folder_files(out),
                        [f"{config.pooling} pooling and normalisation in the graph, token embeddings beside"])


def write_int8(source: Path, kind: ModelKind, out: Path, options: ExportOptions) -> ExportResult:
    from lmplatform.models.openvino_backend import OPENVINO_KEEP_FP32, export_openvino, quantize_openvino

    keep_fp32 = OPENVINO_KEEP_FP32 if options.keep_fp32 is None else options.keep_fp32
    with tempfile.TemporaryDirectory(prefix="lmp-openvino-") as tmp:
        export_openvino(load_encoder(source), tmp)
        config = quantize_openvino(tmp, options.calibration or (), out, keep_fp32)
    kept = f"; kept in higher precision: {', '.join(config.keep_fp32)}" if config.keep_fp32 else ""
    return ExportResult("openvino-int8", kind, out, folder_files(out),
                        [f"{config.pooling} pooling and normalisation in the graph, static int8 calibrated on "
                         f"{config.calibration['texts']} texts{kept}"])


def how_to_load(result: ExportResult) -> str:
    from lmplatform.models.openvino_backend import OpenVinoModelConfig

    config = OpenVinoModelConfig.read(result.folder)
    return (f"Encoder.from_pretrained({str(result.folder)!r}, backend='openvino'), "
            f"SentenceTransformer({str(result.folder)!r}, backend='openvino'), or OpenVINO on "
            f"{result.folder / config.file} (inputs {', '.join(config.inputs)}; outputs {config.output}, "
            f"{config.token_output})")


OPENVINO = ExportFormatSpec(name="openvino", description="for OpenVINO: a bi-encoder's fp32 graph", write=write_fp32,
                            how_to_load=how_to_load)
OPENVINO_INT8 = ExportFormatSpec(
    name="openvino-int8", description="for OpenVINO: a bi-encoder's static int8 graph, calibrated on domain texts",
    write=write_int8, how_to_load=how_to_load, needs_calibration=True)
