"""`onnx` and `onnx-int8`: a bi-encoder as the graph of `onnx_backend` (pooling and normalisation inside) with the
tokenizer, loadable by ONNX Runtime alone or by `Encoder(backend="onnx")`; int8 writes only the quantized graph."""
from __future__ import annotations

import tempfile
from pathlib import Path

from lmplatform.models.export_spec import ExportFormatSpec, ExportOptions, ExportResult, folder_files, load_encoder
from lmplatform.models.kind import ModelKind


def write_fp32(source: Path, kind: ModelKind, out: Path, options: ExportOptions) -> ExportResult:
    from lmplatform.models.onnx_backend import export_onnx

    config = export_onnx(load_encoder(source), out)
    return ExportResult("onnx", kind, out, folder_files(out), [f"{config.pooling} pooling and normalisation in the graph"])


def write_int8(source: Path, kind: ModelKind, out: Path, options: ExportOptions) -> ExportResult:
    from lmplatform.models.encoder import KEEP_FP32_LINEARS
    from lmplatform.models.onnx_backend import export_onnx, quantize_onnx

    keep_fp32 = KEEP_FP32_LINEARS if options.keep_fp32 is None else options.keep_fp32
    with tempfile.TemporaryDirectory(prefix="lmp-onnx-") as tmp:
        export_onnx(load_encoder(source), tmp)
        config = quantize_onnx(tmp, keep_fp32, out)
    kept = f"; kept in fp32: {', '.join(config.keep_fp32)}" if config.keep_fp32 else ""
    how = "fused by ONNX Runtime, MatMul and attention" if config.fused else "MatMul"
    return ExportResult("onnx-int8", kind, out, folder_files(out),
                        [f"{config.pooling} pooling and normalisation in the graph, {how} weights int8 per "
                         f"{'channel' if config.per_channel else 'tensor'}{kept}"])


def how_to_load(result: ExportResult) -> str:
    from lmplatform.models.onnx_backend import OnnxGraphConfig

    graph = OnnxGraphConfig.read(result.folder)
    return (f"Encoder.from_pretrained({str(result.folder)!r}, backend='onnx'), or ONNX Runtime on "
            f"{result.folder / graph.file} (inputs {', '.join(graph.inputs)}; output {graph.output})")


ONNX = ExportFormatSpec(name="onnx", description="for ONNX Runtime: a bi-encoder's fp32 graph", write=write_fp32,
                        how_to_load=how_to_load)
ONNX_INT8 = ExportFormatSpec(name="onnx-int8", description="for ONNX Runtime: a bi-encoder's dynamic int8 graph",
                             write=write_int8, how_to_load=how_to_load)
