"""The ONNX form of an `Encoder`: export (pooling and normalisation inside the graph), int8, and the runtime session.

The exported graph takes the tokenizer's tensors (`input_ids`, `attention_mask`, and
`token_type_ids` where the model uses them) and returns `sentence_embedding`
[batch, dim]: the encoder's pooling and an L2 normalisation are part of the graph, so a
consumer that only has ONNX Runtime and the tokenizer gets the same vectors as
`Encoder.encode`, with no pooling to re-implement (and none to guess wrong).

The graph is traced with eager attention (the same numbers as SDPA), whose MatMul/Softmax pattern ONNX
Runtime's transformer optimizer recognises: `quantize_onnx` first fuses a BERT-family graph (one
Attention op per layer, SkipLayerNorm, BiasGelu, EmbedLayerNorm), then quantizes it with ONNX Runtime's
dynamic quantization: MatMul and Attention weights in int8 with one scale per output channel,
activations quantized per batch; the MatMuls of `keep_fp32` (module names, as `KEEP_FP32_LINEARS` of
the PyTorch int8 path) stay in fp32. On MiniLM, per-channel scales keep every vector of the bench's texts
within cosine 0.99 of fp32 (0.96 per tensor), at the same speed. The fused int8 graph uses ONNX Runtime's
contrib operators; the fp32 graph is plain ONNX. Other architectures are quantized unfused.

A folder holding a graph carries `ONNX_CONFIG` (which file, which inputs, how it pools), the
tokenizer, the model's config.json and `lmplatform_encoder.json`, so `Encoder.from_pretrained(folder,
backend="onnx")` loads it and `resolve_model_path` accepts it like any model folder.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

ONNX_CONFIG = "lmplatform_onnx.json"
OUTPUT = "sentence_embedding"
OPSET = 17
FP32_FILE = "encoder.onnx"
INT8_FILE = "encoder_int8.onnx"


@dataclass
class OnnxGraphConfig:
    """What a folder's ONNX graph expects and produces (written as `ONNX_CONFIG`)."""

    file: str
    inputs: list[str]
    dim: int
    pooling: str
    max_seq_length: int
    normalized: bool = True
    quantization: Optional[str] = None
    keep_fp32: list[str] = field(default_factory=list)
    output: str = OUTPUT
    opset: int = OPSET
    fused: bool = False
    per_channel: bool = False

    def write(self, folder: Path) -> None:
        (folder / ONNX_CONFIG).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, folder: Path) -> "OnnxGraphConfig":
        return cls(**json.loads((folder / ONNX_CONFIG).read_text()))


def has_onnx_graph(folder: Path) -> bool:
    return (Path(folder) / ONNX_CONFIG).is_file()


def _graph_module(encoder: "Encoder", names: Sequence[str], normalize: bool) -> Any:
    import torch
    from torch import nn

    class SentenceEmbedding(nn.Module):
        """The encoder's tensors in, pooled (and normalised) vectors out: what the graph computes."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            features = dict(zip(names, tensors))
            vectors = self.encoder(features.pop("input_ids"), features.pop("attention_mask"), **features)
            return torch.nn.functional.normalize(vectors, dim=-1) if normalize else vectors

    return SentenceEmbedding().eval()


def export_onnx(encoder: "Encoder", folder: str | Path, normalize: bool = True) -> OnnxGraphConfig:
    """Write `encoder` as an fp32 ONNX graph plus everything needed to load it into `folder`."""
    import torch

    if encoder.backbone is None or encoder.quantized:
        raise ValueError("export needs the fp32 PyTorch encoder (load it with backend='torch' and no quantize)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # Two texts of different lengths: the sample has padding, so the mask paths are traced too.
    sample = encoder.tokenizer(["an example text to trace the graph with", "short"], padding=True, return_tensors="pt")
    names = [n for n in encoder.tokenizer.model_input_names if n in sample]
    if "input_ids" not in names or "attention_mask" not in names:
        raise ValueError(f"the tokenizer produces {names}; an ONNX export needs input_ids and attention_mask")
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {OUTPUT: {0: "batch"}}
    module = _graph_module(encoder.cpu(), names, normalize)
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
    encoder.tokenizer.save_pretrained(str(folder))
    encoder.backbone.config.save_pretrained(str(folder))
    from lmplatform.models.encoder import write_encoder_config

    write_encoder_config(folder, encoder.pooling, encoder.max_seq_length)
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
    """An ONNX Runtime session over a folder's graph: numpy tensors in, float32 vectors out."""

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

    def run(self, features: dict[str, np.ndarray]) -> np.ndarray:
        feeds = {name: features[name].astype(np.int64, copy=False) for name in self.config.inputs}
        return self.session.run([self.config.output], feeds)[0].astype(np.float32, copy=False)
