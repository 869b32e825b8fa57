"""`Encoder`: a Hugging Face encoder with a pooling head.

`encode` tokenizes once, sorts texts by token count so each batch pads only to
its own longest text, runs under `torch.inference_mode` with a chosen number of
threads, and returns float32 L2-normalised vectors in the caller's order.

`quantize="int8"` (or `quantize_encoder`) swaps the `nn.Linear` layers of the
backbone (all but `KEEP_FP32_LINEARS`) for dynamically quantized int8 ones (CPU
only): weights are stored in int8 and activations are quantized per batch, which
roughly halves the time in the matrix multiplies that dominate a BERT forward pass
on CPU.

`encode(precision="bf16"|"fp16"|"auto")` runs the forward passes under autocast (models/precision.py):
bf16 on a CPU with AVX512-BF16 encodes about 1.8x faster than fp32, each vector within a cosine of 0.99997
of the fp32 one (MiniLM, OpenOffice reports).

`backend="onnx"` runs the same encoder as an ONNX Runtime graph (`onnx_backend`), `backend="openvino"` as
an OpenVINO model (`openvino_backend`, the optional `openvino` extra): a folder exported by
`lmp export --format onnx|onnx-int8|openvino|openvino-int8` is loaded as it is; any other model folder is
exported on load (with `quantize="int8"`, quantized too: dynamically for ONNX, statically for OpenVINO, which
needs `calibration` texts of the served domain). Tokenization, batching and the order of the result are the
same code for every backend; the graph ones only encode (no training, no un-normalised vectors: the
normalisation is part of the graph). OpenVINO also runs bf16 (`precision`), ONNX Runtime does not, and
keeps a batch in flight per runtime stream when there is more than one (`OpenVinoSession.run_into`).

`precision` given to `from_pretrained` is the encoder's default for `encode` (fp32 unless set).
"""
from __future__ import annotations

import logging
import tempfile
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, ContextManager, Iterable, Iterator, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lmplatform.models.encoder_config import read_encoder_config, write_encoder_config
from lmplatform.models.graph import GraphSession
from lmplatform.models.long_texts import encoder_heads
from lmplatform.models.onnx_backend import OnnxGraphConfig, OnnxSession, export_onnx, has_onnx_graph, quantize_onnx
from lmplatform.models.openvino_backend import (
    OPENVINO_KEEP_FP32,
    OpenVinoModelConfig,
    OpenVinoSession,
    export_openvino,
    has_openvino_model,
    quantize_openvino,
)
from lmplatform.models.pooling import Pooling, pool
from lmplatform.models.precision import Precision, autocast, resolve_precision
from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import DEFAULT_MODEL, resolve_model_path

logger = logging.getLogger(__name__)
Quantization = Literal["int8"]
QUANTIZATIONS = ("int8",)
Backend = Literal["torch", "onnx", "openvino"]
BACKENDS = ("torch", "onnx", "openvino")


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    path = resolve_model_path(str(name_or_path))
    return AutoTokenizer.from_pretrained(str(path))


class Encoder(nn.Module):
    def __init__(
        self,
        backbone: Optional[PreTrainedModel],
        tokenizer: PreTrainedTokenizerBase,
        pooling: Pooling = "mean",
        max_seq_length: int = 128,
        graph: Optional[GraphSession] = None,
        precision: Precision = "fp32",
    ):
        super().__init__()
        if (backbone is None) == (graph is None):
            raise ValueError("an Encoder runs either a PyTorch backbone or a graph session: give exactly one")
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooling: Pooling = pooling
        self.max_seq_length = max_seq_length
        self.graph = graph
        self.precision: Precision = precision

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path = DEFAULT_MODEL,
        pooling: Optional[Pooling] = None,
        max_seq_length: Optional[int] = None,
        quantize: Optional[Quantization] = None,
        backend: Backend = "torch",
        precision: Precision = "fp32",
        calibration: Optional[Sequence[str]] = None,
    ) -> "Encoder":
        """Load an encoder; pooling and length default to what the folder was saved with.

        `quantize="int8"` returns a CPU encoder with dynamically quantized Linear layers
        (backend "torch"), the int8 ONNX graph (backend "onnx") or the static int8 OpenVINO model (backend
        "openvino", calibrated on `calibration`; see the module doc). `precision`: `encode`'s default.
        """
        if quantize is not None and quantize not in QUANTIZATIONS:
            raise ValueError(f"quantize={quantize!r} is not supported; allowed: None, {', '.join(QUANTIZATIONS)}")
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not supported; allowed: {', '.join(BACKENDS)}")
        resolve_precision(precision, torch.device("cpu"))  # a bad name fails here, not at the first encode
        path = resolve_model_path(str(name_or_path))
        if backend == "onnx":
            encoder = cls._from_onnx(path, quantize, max_seq_length)
        elif backend == "openvino":
            encoder = cls._from_openvino(path, quantize, max_seq_length, calibration)
        else:
            encoder = cls._from_torch(path, pooling, max_seq_length, quantize)
        encoder.precision = precision
        return encoder

    @classmethod
    def _from_torch(cls, path: Path, pooling: Optional[Pooling], max_seq_length: Optional[int],
                    quantize: Optional[Quantization]) -> "Encoder":
        for held, backend in ((has_onnx_graph(path), "onnx"), (has_openvino_model(path), "openvino")):
            if held:
                raise ValueError(f"{path} holds a {backend} export, not PyTorch weights: load it with backend='{backend}'")
        saved = read_encoder_config(path)
        with quiet_transformers():  # a folder saved with a head (MLM, classifier) drops it here, as expected
            backbone = AutoModel.from_pretrained(str(path))
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        encoder = cls(
            backbone,
            tokenizer,
            pooling=pooling or saved.get("pooling", "mean"),
            max_seq_length=max_seq_length or saved.get("max_seq_length", 128),
        )
        return quantize_encoder(encoder) if quantize == "int8" else encoder

    @classmethod
    def _from_onnx(cls, path: Path, quantize: Optional[Quantization], max_seq_length: Optional[int]) -> "Encoder":
        """The ONNX backend over `path`'s graph, or over a graph exported from `path` now (kept in memory only)."""
        with tempfile.TemporaryDirectory(prefix="lmp-onnx-") as tmp:
            folder = path
            if not has_onnx_graph(path):
                export_onnx(cls.from_pretrained(path), tmp)
                folder = Path(tmp)
            config = OnnxGraphConfig.read(folder)
            if quantize == "int8" and config.quantization is None:
                quantize_onnx(folder, KEEP_FP32_LINEARS, Path(tmp) / "int8")
                folder = Path(tmp) / "int8"
            # The session holds the graph in memory: the temporary files can go.
            session = OnnxSession(folder, torch.get_num_threads())
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
        return cls(None, tokenizer, pooling=config.pooling,  # type: ignore[arg-type]
                   max_seq_length=max_seq_length or config.max_seq_length, graph=session)

    @classmethod
    def _from_openvino(cls, path: Path, quantize: Optional[Quantization], max_seq_length: Optional[int],
                       calibration: Optional[Sequence[str]]) -> "Encoder":
        """The OpenVINO backend over `path`'s model, or over one converted from `path` now (kept in memory only)."""
        exported_int8 = has_openvino_model(path) and OpenVinoModelConfig.read(path).quantization is not None
        if quantize == "int8" and not calibration and not exported_int8:
            raise ValueError("backend='openvino', quantize='int8' is static int8: give calibration texts of the "
                             "served domain (calibration=[...]) or load an `lmp export --format openvino-int8` folder")
        with tempfile.TemporaryDirectory(prefix="lmp-openvino-") as tmp:
            folder = path
            if not has_openvino_model(path):
                export_openvino(cls.from_pretrained(path), Path(tmp) / "fp32")
                folder = Path(tmp) / "fp32"
            if quantize == "int8" and not exported_int8:
                quantize_openvino(folder, calibration or (), Path(tmp) / "int8", OPENVINO_KEEP_FP32)
                folder = Path(tmp) / "int8"
            session = OpenVinoSession(folder, torch.get_num_threads())
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
        return cls(None, tokenizer, pooling=session.config.pooling,  # type: ignore[arg-type]
                   max_seq_length=max_seq_length or session.config.max_seq_length, graph=session)

    @property
    def quantized(self) -> bool:
        if self.graph is not None:
            return self.graph.config.quantization is not None
        return getattr(self, "_quantized", False)

    @property
    def backend(self) -> Backend:
        return self.graph.backend if self.graph is not None else "torch"  # type: ignore[return-value]

    @property
    def dim(self) -> int:
        if self.graph is not None:
            return self.graph.config.dim
        return int(self.backbone.config.hidden_size)

    @property
    def device(self) -> torch.device:
        if self.graph is not None:
            return torch.device("cpu")
        return next(self.backbone.parameters()).device

    def tokenize(self, texts: Sequence[str], max_length: Optional[int] = None) -> dict[str, torch.Tensor]:
        max_length = max_length or self.max_seq_length
        return self.tokenizer(
            encoder_heads(self.tokenizer, texts, max_length),
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text is encoded with (special tokens included, after truncation to max_seq_length)."""
        return [len(ids) for ids in self._read_tokens(texts)["input_ids"]]

    def _read_tokens(self, texts: Sequence[str]) -> Any:
        """The tokens the encoder reads of each text, unpadded: its head (`long_texts`) truncated to max_seq_length."""
        return self.tokenizer(encoder_heads(self.tokenizer, texts, self.max_seq_length), truncation=True,
                              max_length=self.max_seq_length, padding=False)

    def token_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor) -> torch.Tensor:
        if self.backbone is None:
            raise ValueError(f"an Encoder on backend {self.backend!r} only encodes (Encoder.encode); load "
                             "backend='torch' for tensors")
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor) -> torch.Tensor:
        """Pooled, un-normalised text vectors [batch, dim]."""
        return pool(self.token_embeddings(input_ids, attention_mask, **extra), attention_mask, self.pooling)

    def encode(
        self,
        texts: Iterable[str],
        batch_size: int = 32,
        normalize: bool = True,
        show_progress: bool = False,
        num_threads: Optional[int] = None,
        precision: Optional[Precision] = None,
    ) -> np.ndarray:
        """Encode texts to float32 vectors [len(texts), dim] in the given order.

        num_threads: torch intra-op threads for this call (restored afterwards);
        None keeps the process setting.
        precision: the forward passes' type (None: the encoder's `precision`). Backend "torch": autocast, `auto`
        as in models/precision.py, fp32 for an int8 encoder; "openvino": the runtime's inference precision for
        what is not int8; "onnx": fp32 only. The vectors are float32 either way.
        """
        texts = list(texts)
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        autocast, graph_precision = self._precision_plan(self.precision if precision is None else precision)
        if self.graph is not None and normalize != self.graph.config.normalized:
            raise ValueError(f"this {self.backend} graph returns {'' if self.graph.config.normalized else 'un'}normalised "
                             f"vectors; encode(normalize={normalize}) needs backend='torch'")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # One tokenizer call for all texts (the fast tokenizer batches it in Rust),
        # then batches of similar token counts: padding is only what a batch needs.
        encoded = self._read_tokens(texts)
        ids = encoded["input_ids"]
        extra_keys = [k for k in encoded.keys() if k not in ("input_ids", "attention_mask")]
        order = np.argsort([-len(x) for x in ids], kind="stable")
        was_training = self.training
        self.eval()
        progress = None
        if show_progress:
            from tqdm.auto import tqdm

            progress = tqdm(total=len(texts), desc="encode", unit="text", smoothing=0.1)
        device = self.device
        pad_id = self.tokenizer.pad_token_id or 0

        def batches() -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
            # numpy, not torch: a graph runtime takes these arrays as they are (torch views them for free).
            for start in range(0, len(texts), batch_size):
                index = order[start : start + batch_size]
                width = len(ids[index[0]])
                arrays = {k: np.zeros((len(index), width), dtype=np.int64) for k in ["attention_mask", *extra_keys]}
                arrays["input_ids"] = np.full((len(index), width), pad_id, dtype=np.int64)
                for row, i in enumerate(index):
                    n = len(ids[i])
                    arrays["input_ids"][row, :n] = ids[i]
                    arrays["attention_mask"][row, :n] = 1
                    for k in extra_keys:
                        arrays[k][row, :n] = encoded[k][i]
                yield index, arrays
                if progress is not None:
                    progress.update(len(index))

        try:
            with _torch_threads(num_threads), torch.inference_mode(), autocast:
                if len(texts) > batch_size and hasattr(self.graph, "run_into"):  # many batches in flight
                    self.graph.run_into(batches(), out, graph_precision)
                elif self.graph is not None:
                    for index, arrays in batches():
                        out[index] = self.graph.run(arrays, graph_precision)
                else:
                    for index, arrays in batches():
                        features = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
                        vectors = self(features.pop("input_ids"), features.pop("attention_mask"), **features).float()
                        if normalize:
                            vectors = torch.nn.functional.normalize(vectors, dim=-1)
                        out[index] = vectors.cpu().numpy()
        finally:
            if progress is not None:
                progress.close()
            self.train(was_training)
        return out

    def _precision_plan(self, precision: str) -> tuple[ContextManager[None], str]:
        """(the torch forward passes' autocast, the graph's resolved precision) for `precision`: `auto` is fp32
        where bf16 is not run (an ONNX graph, a torch int8 encoder); asking for it there is an error."""
        resolved = resolve_precision(precision, self.device)
        runs_fp32_only = self.backend == "onnx" or (self.graph is None and self.quantized)
        if runs_fp32_only and precision == "auto":
            resolved = "fp32"
        if runs_fp32_only and resolved != "fp32":
            what = "an ONNX graph" if self.graph is not None else "an int8 PyTorch encoder"
            raise ValueError(f"precision={precision!r}: {what} runs in fp32; encode it with precision='fp32', or use an "
                             "fp32 encoder on backend 'torch' or 'openvino' for bf16")
        if self.graph is None:
            return autocast(resolved, self.device, "precision"), "fp32"
        if resolved == "fp16":
            raise ValueError("precision='fp16' needs a CUDA device and graph backends run on CPU; use 'bf16' or 'fp32'")
        return nullcontext(), resolved

    def save_pretrained(self, path: str | Path) -> Path:
        if self.graph is not None:
            raise ValueError(f"an encoder on backend {self.backend!r} is saved by `lmp export`, not as a Hugging Face folder")
        if self.quantized:
            raise ValueError("a quantized encoder cannot be saved as a Hugging Face folder; save the fp32 model "
                             "and load it with quantize='int8'")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        write_encoder_config(path, self.pooling, self.max_seq_length)
        return path


# Linear layers left in fp32 by `quantize_encoder`. The first layer's feed-forward output
# reads activations with outliers that int8 rounds badly: on MiniLM, keeping it in fp32 cut
# the STS-B Spearman drop from 0.011 to 0.007 (0.8203 fp32; 0.8095 all int8; 0.8130 with it
# kept), for about 1/8 of the int8 speed-up.
KEEP_FP32_LINEARS = ("encoder.layer.0.output.dense",)


def quantize_encoder(encoder: Encoder) -> Encoder:
    """Dynamic int8 quantization of the backbone's Linear layers but `KEEP_FP32_LINEARS`, in place (CPU only)."""
    if encoder.graph is not None:
        raise ValueError(f"quantize_encoder quantizes PyTorch layers; for {encoder.backend} load with "
                         f"backend='{encoder.backend}', quantize='int8'")
    if encoder.device.type != "cpu":
        raise ValueError(f"int8 dynamic quantization runs on CPU; the encoder is on {encoder.device}")
    with warnings.catch_warnings():
        # torch.ao.quantization is marked deprecated in favour of torchao, which is not a
        # dependency here; quantize_dynamic still works and is tested.
        warnings.simplefilter("ignore")
        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

        names = {name: default_dynamic_qconfig for name, module in encoder.backbone.named_modules()
                 if isinstance(module, nn.Linear) and not name.endswith(KEEP_FP32_LINEARS)}
        encoder.backbone = quantize_dynamic(encoder.backbone.eval(), names, dtype=torch.qint8)
    encoder._quantized = True
    return encoder


@contextmanager
def _torch_threads(num_threads: Optional[int]) -> Iterator[None]:
    if num_threads is None:
        yield
        return
    if num_threads <= 0:
        raise ValueError(f"num_threads must be positive, got {num_threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
