"""The ONNX form of an `Encoder`: export (pooling and normalisation inside the graph), int8, and the runtime session.

The exported graph is the one of `models/graph.py`: the tokenizer's tensors in, `sentence_embedding` out,
pooled and normalised, so a consumer with only ONNX Runtime and the tokenizer has no pooling to re-implement
(and none to guess wrong).

The graph is traced with eager attention (the same numbers as SDPA), whose MatMul/Softmax pattern ONNX
Runtime's transformer optimizer recognises: `quantize_onnx` first fuses a BERT-family graph (one
Attention op per layer, SkipLayerNorm, BiasGelu, EmbedLayerNorm), then quantizes it with ONNX Runtime's
dynamic quantization: MatMul and Attention weights in int8 with one scale per output channel,
activations quantized per batch; the MatMuls of `keep_fp32` (module names, as `KEEP_FP32_LINEARS` of
the PyTorch int8 path) stay in fp32. On MiniLM, per-channel scales keep every vector of the bench's texts
within cosine 0.99 of fp32 (0.96 per tensor), at the same speed. The fused int8 graph uses ONNX Runtime's
contrib operators; the fp32 graph is plain ONNX. Other architectures are quantized unfused.

A folder holding a graph carries `ONNX_CONFIG` (an `OnnxGraphConfig`) beside the model files, so
`Encoder.from_pretrained(folder, backend="onnx")` loads it.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Optional, Sequence

import numpy as np

from lmplatform.models.graph import OUTPUT, GraphConfig, sentence_embedding_module, trace_inputs, write_model_files

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

ONNX_CONFIG = "lmplatform_onnx.json"
OPSET = 17
FP32_FILE = "encoder.onnx"
INT8_FILE = "encoder_int8.onnx"


@dataclass
class OnnxGraphConfig(GraphConfig):
    """What a folder's ONNX graph expects and produces (written as `ONNX_CONFIG`)."""

    FILE: ClassVar[str] = ONNX_CONFIG

    opset: int = OPSET
    fused: bool = False
    per_channel: bool = False


def has_onnx_graph(folder: Path) -> bool:
    return OnnxGraphConfig.held_by(folder)


def export_onnx(encoder: "Encoder", folder: str | Path, normalize: bool = True) -> OnnxGraphConfig:
    """Write `encoder` as an fp32 ONNX graph plus everything needed to load it into `folder`."""
    import torch

    sample, names = trace_inputs(encoder)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {OUTPUT: {0: "batch"}}
    module = sentence_embedding_module(encoder.cpu(), names, normalize)
    attention = encoder.backbone.config._attn_implementation
    encoder.backbone.set_attn_implementation("eager")  # the pattern ONNX Runtime fuses (see the module doc)
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            # The TorchScript exporter (dynamo=False) needs no onnxscript; its tracer warnings are about
            # shape checks in transformers' attention-mask code that hold for every (batch, sequence).
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(sample[n] for n in names), str(folder / FP32_FILE), input_names=names,
                              output_names=[OUTPUT], dynamic_axes=axes, opset_version=OPSET, dynamo=False)
    finally:
        encoder.backbone.set_attn_implementation(attention)
    write_model_files(encoder, folder)
    config = OnnxGraphConfig(FP32_FILE, names, encoder.dim, encoder.pooling, encoder.max_seq_length, normalize)
    config.write(folder)
    return config


def _onnx_scope(module_name: str) -> str:
    """A module name as the exporter scopes its nodes: `encoder.layer.0.output.dense` -> `encoder/layer.0/output/dense`."""
    parts: list[str] = []
    for part in module_name.split("."):
        if part.isdigit() and parts:
            parts[-1] += f".{part}"
        else:
            parts.append(part)
    return "/".join(parts)


# model_type (config.json) -> ONNX Runtime's optimizer for it; others are quantized unfused.
FUSABLE = {"bert": "bert"}


def fuse_graph(folder: Path, source: Path, target: Path) -> bool:
    """ONNX Runtime's transformer fusions of `source` written to `target`; False (nothing written) if the
    architecture has no optimizer here."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((folder / "config.json").read_text())
    model_type = FUSABLE.get(config.get("model_type", ""))
    if model_type is None:
        return False
    fused = optimize_model(str(source), model_type=model_type, num_heads=int(config["num_attention_heads"]),
                           hidden_size=int(config["hidden_size"]), opt_level=1)
    fused.save_model_to_file(str(target))
    return True


def quantize_onnx(folder: str | Path, keep_fp32: Sequence[str] = (), out: Optional[str | Path] = None,
                  fuse: bool = True, per_channel: bool = True) -> OnnxGraphConfig:
    """The int8 variant of the fp32 graph in `folder`, written to `out` (default: the same folder, `INT8_FILE`)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = Path(folder)
    source = OnnxGraphConfig.read(folder)
    if source.quantization is not None:
        raise ValueError(f"{folder / source.file} is already quantized ({source.quantization})")
    target = Path(out) if out is not None else folder
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        prepared = Path(tmp) / "prepared.onnx"
        fused = fuse and fuse_graph(folder, folder / source.file, Path(tmp) / "fused.onnx")
        # Shape inference first, as ONNX Runtime recommends before quantizing: the quantizer then knows
        # every MatMul's operand shapes. A fused graph is already optimised.
        quant_pre_process(str(Path(tmp) / "fused.onnx" if fused else folder / source.file), str(prepared),
                          skip_optimization=fused, skip_symbolic_shape=True)
        scopes = [f"/{_onnx_scope(name)}/" for name in keep_fp32]
        nodes = [n.name for n in onnx.load(str(prepared), load_external_data=False).graph.node]
        excluded = [n for n in nodes if any(scope in n for scope in scopes)]
        missing = [name for name, scope in zip(keep_fp32, scopes) if not any(scope in n for n in nodes)]
        if missing:
            raise ValueError(f"keep_fp32 names modules the {'fused ' if fused else ''}graph does not have: {missing}")
        # Fused graphs hold contrib ops whose outputs shape inference cannot type: they are float.
        quantize_dynamic(str(prepared), str(target / INT8_FILE), weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Attention"] if fused else ["MatMul"],
                         nodes_to_exclude=excluded, per_channel=per_channel,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    if target != folder:
        for name in os.listdir(folder):
            if name not in (source.file, ONNX_CONFIG) and (folder / name).is_file():
                (target / name).write_bytes((folder / name).read_bytes())
    config = OnnxGraphConfig(INT8_FILE, source.inputs, source.dim, source.pooling, source.max_seq_length,
                             source.normalized, "int8", list(keep_fp32), fused=fused, per_channel=per_channel)
    config.write(target)
    return config


class OnnxSession:
    """An ONNX Runtime session over a folder's graph: numpy tensors in, float32 vectors out (a `GraphSession`)."""

    backend = "onnx"

    def __init__(self, folder: str | Path, num_threads: Optional[int] = None):
        import onnxruntime as ort

        folder = Path(folder)
        self.config = OnnxGraphConfig.read(folder)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: ORT warns about every initializer it folds
        if num_threads:
            options.intra_op_num_threads = num_threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(folder / self.config.file), options, providers=["CPUExecutionProvider"])

    def run(self, features: dict[str, np.ndarray], precision: str = "fp32") -> np.ndarray:
        if precision != "fp32":
            raise ValueError(f"precision={precision!r}: an ONNX graph runs in fp32 (or int8); use backend 'torch' "
                             "or 'openvino' for bf16")
        feeds = {name: features[name].astype(np.int64, copy=False) for name in self.config.inputs}
        return self.session.run([self.config.output], feeds)[0].astype(np.float32, copy=False)
