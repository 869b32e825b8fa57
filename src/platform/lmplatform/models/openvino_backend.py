"""The OpenVINO form of an `Encoder`: conversion, static int8 with NNCF, and the runtime session.

Conversion uses OpenVINO's own converter on the traced module of `models/graph.py` (no optimum, which caps
transformers below this project's version). The graph has two outputs: `sentence_embedding` (pooled and
normalised, what `Encoder.encode` returns) and `last_hidden_state` (the token embeddings, what
sentence-transformers' OpenVINO backend pools with the modules.json written beside it). The folder:

    openvino/openvino_model.xml, .bin   the graph (fp32 weights, or int8 after `quantize_openvino`)
    lmplatform_openvino.json            `OpenVinoModelConfig`
    tokenizer, config.json, lmplatform_encoder.json, modules.json, 1_Pooling/, 2_Normalize/

`quantize_openvino` is static post-training quantization (`nncf.quantize`, transformer preset): weights and
activations in int8, the activations' ranges measured on calibration texts that should come from the served
domain (dev texts, never test). The MatMuls of `keep_fp32` (module names, as for the other backends) stay in
the inference precision. Calibration texts are run one at a time, so padding never enters the ranges.

Inference precision: the CPU plugin runs the non-int8 operations in bf16 when asked (`precision="bf16"` or
`"auto"` on a CPU with AVX512-BF16 or AMX, as `models/precision.py` decides), else in fp32.

OpenVINO and NNCF are the optional `openvino` extra; without them every entry point raises `MissingExtra`,
which names the extra to install.
"""
from __future__ import annotations

import importlib
import json
import logging
import re
import shutil
import threading
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Optional, Sequence

import numpy as np

from lmplatform.data.fields import join_fields
from lmplatform.data.readers import DataError
from lmplatform.models.graph import (
    OUTPUT,
    TOKEN_OUTPUT,
    GraphConfig,
    sentence_embedding_module,
    trace_inputs,
    write_model_files,
)
from lmplatform.models.sentence_transformers_layout import write_sentence_transformers_modules

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

OPENVINO_CONFIG = "lmplatform_openvino.json"
MODEL_FILE = "openvino/openvino_model.xml"  # where sentence-transformers' backend="openvino" looks
EXTRA = "openvino"
# The runtime's inference precision per resolved `Precision` (fp16 runs on CUDA only, as for torch).
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}
CALIBRATION_SIZE = 300
# Linear layers the int8 graph keeps in the inference precision (module names) unless told otherwise: none.
# bench/encode_throughput.py chooses them on dev (all of STS-B dev, every OpenOffice dev query), the fewest within a
# 0.005 drop: it chose none on 26 and 27 Nov (dev drops 0.0003 STS-B, 0.001 MRR@10 with every layer int8).
OPENVINO_KEEP_FP32: tuple[str, ...] = ()


class MissingExtra(ImportError):
    """An optional dependency is not installed (the message names the extra that brings it)."""


def require(module: str) -> Any:
    """Import `module` (openvino or nncf), or raise `MissingExtra` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"backend 'openvino' needs {module}, which is not installed: install the optional extra "
                           f"with `pip install 'lmplatform[{EXTRA}]'` (OpenVINO and NNCF)") from exc


@dataclass
class OpenVinoModelConfig(GraphConfig):
    """What a folder's OpenVINO graph expects and produces (written as `OPENVINO_CONFIG`)."""

    FILE: ClassVar[str] = OPENVINO_CONFIG

    token_output: str = TOKEN_OUTPUT
    calibration: dict[str, Any] = field(default_factory=dict)


def has_openvino_model(folder: Path) -> bool:
    return OpenVinoModelConfig.held_by(folder)


def export_openvino(encoder: "Encoder", folder: str | Path, normalize: bool = True) -> OpenVinoModelConfig:
    """Write `encoder` as an fp32 OpenVINO folder (see the module doc)."""
    ov = require("openvino")
    import torch

    sample, names = trace_inputs(encoder)
    folder = Path(folder)
    module = sentence_embedding_module(encoder.cpu(), names, normalize, token_output=True)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # tracer warnings on transformers' mask code, as for the ONNX export
        model = ov.convert_model(module, example_input=tuple(sample[n] for n in names))
    for port, name in zip(model.inputs, names):
        port.get_tensor().set_names({name})
        port.get_node().set_partial_shape(ov.PartialShape([-1, -1]))
    model.outputs[0].get_tensor().set_names({TOKEN_OUTPUT})
    model.outputs[1].get_tensor().set_names({OUTPUT})
    model.validate_nodes_and_infer_types()
    (folder / MODEL_FILE).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(folder / MODEL_FILE), compress_to_fp16=False)
    write_model_files(encoder, folder)
    write_sentence_transformers_modules(encoder, folder, normalize)
    config = OpenVinoModelConfig(MODEL_FILE, names, encoder.dim, encoder.pooling, encoder.max_seq_length, normalize)
    config.write(folder)
    return config


def _matmul_patterns(model: Any, keep_fp32: Sequence[str]) -> list[str]:
    """NNCF ignored-scope patterns for the MatMuls of the modules `keep_fp32` names (`encoder.layer.0.output.dense`);
    the converter names a module's operations `__module.<path>/aten::...`."""
    patterns = [rf".*\.{re.escape(name)}/.*" for name in keep_fp32]
    operations = [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    missing = [name for name, pattern in zip(keep_fp32, patterns) if not any(re.fullmatch(pattern, o) for o in operations)]
    if missing:
        raise ValueError(f"keep_fp32 names modules the graph has no MatMul of: {missing}")
    return patterns


def quantize_openvino(folder: str | Path, calibration_texts: Sequence[str], out: str | Path, keep_fp32: Sequence[str] = (),
                      calibration_size: int = CALIBRATION_SIZE) -> OpenVinoModelConfig:
    """The static int8 variant of the fp32 folder `folder`, written to the folder `out`, calibrated on up to
    `calibration_size` of `calibration_texts` (see the module doc)."""
    ov, nncf = require("openvino"), require("nncf")
    from transformers import AutoTokenizer

    folder = Path(folder)
    source = OpenVinoModelConfig.read(folder)
    if source.quantization is not None:
        raise ValueError(f"{folder / source.file} is already quantized ({source.quantization})")
    texts = [t for t in calibration_texts if t and t.strip()][:calibration_size]
    if not texts:
        raise ValueError("static int8 quantization needs calibration texts (texts of the served domain); none were given")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    samples = []
    for text in texts:
        encoded = tokenizer([text], truncation=True, max_length=source.max_seq_length, return_tensors="np")
        samples.append({name: encoded[name].astype(np.int64) for name in source.inputs})
    model = ov.Core().read_model(str(folder / source.file))
    ignored = nncf.IgnoredScope(patterns=_matmul_patterns(model, keep_fp32)) if keep_fp32 else None
    nncf_logger, level = logging.getLogger("nncf"), logging.getLogger("nncf").level
    nncf_logger.setLevel(logging.WARNING)  # not a line per operation it leaves unquantized
    try:
        quantized = nncf.quantize(model, nncf.Dataset(samples), model_type=nncf.ModelType.TRANSFORMER,
                                  subset_size=len(samples), ignored_scope=ignored)
    finally:
        nncf_logger.setLevel(level)
    target = Path(out)
    if target.resolve() == folder.resolve():
        raise ValueError(f"quantize_openvino writes a new folder: out must not be {folder}")
    shutil.copytree(folder, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("openvino_model.*"))
    ov.save_model(quantized, str(target / MODEL_FILE))
    config = OpenVinoModelConfig(MODEL_FILE, source.inputs, source.dim, source.pooling, source.max_seq_length,
                                 source.normalized, "int8", list(keep_fp32),
                                 calibration={"texts": len(samples), "method": "nncf static, transformer preset"})
    config.write(target)
    return config


REQUESTS_PER_STREAM = 2  # one running, one waiting ready behind it


class OpenVinoSession:
    """An OpenVINO CPU model over a folder: numpy tensors in, float32 vectors out (a `GraphSession`).

    Two ways to run, each compiled per inference precision when first asked for:
    - `run`, one batch (a served query): the latency hint, one infer request on every thread; calls are serialised.
    - `run_into`, many batches (encoding a corpus): the throughput hint, as many batches in flight as the runtime
      has streams, each on fewer threads, and as many again queued behind them: two batches of a small model on
      one thread each keep 2 cores busier than one batch split across both (bench/openvino_streams.py).
    """

    backend = "openvino"

    def __init__(self, folder: str | Path, num_threads: Optional[int] = None):
        ov = require("openvino")
        folder = Path(folder)
        self.config = OpenVinoModelConfig.read(folder)
        self.core = ov.Core()
        self.model = self.core.read_model(str(folder / self.config.file))
        self.num_threads = num_threads
        self._requests: dict[str, Any] = {}
        self._bulk_models: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._bulk_lock = threading.Lock()

    def _compile(self, precision: str, hint: str) -> Any:
        if precision not in PRECISION_HINTS:
            raise ValueError(f"precision={precision!r}: the OpenVINO CPU backend runs {', '.join(PRECISION_HINTS)}")
        settings = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[precision], "PERFORMANCE_HINT": hint}
        if self.num_threads:
            settings["INFERENCE_NUM_THREADS"] = self.num_threads
        return self.core.compile_model(self.model, "CPU", settings)

    def _feeds(self, features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: features[name].astype(np.int64, copy=False) for name in self.config.inputs}

    def run(self, features: dict[str, np.ndarray], precision: str = "fp32") -> np.ndarray:
        with self._lock:
            if precision not in self._requests:
                self._requests[precision] = self._compile(precision, "LATENCY").create_infer_request()
            result = self._requests[precision].infer(self._feeds(features))
            # Copied out: the request reuses its output buffer on the next call.
            return np.array(result[self.config.output], dtype=np.float32)

    def run_into(self, batches: Iterable[tuple[np.ndarray, dict[str, np.ndarray]]], out: np.ndarray,
                 precision: str = "fp32") -> None:
        """Run every (rows, features) batch, writing its vectors to `out[rows]`; returns when all are written.

        Twice the requests the runtime has streams for: the next batches wait ready while the streams run, so no
        stream idles while this thread pads a batch or copies vectors out. This thread waits for the oldest request
        and copies its vectors out itself. No Python callback is handed to the runtime: a compiled model being
        destroyed joins the runtime's threads while holding the GIL, and with Python callbacks given to those threads
        that join was seen to hang for good (`backend: auto` dropping a timed candidate in a Ray Data actor)."""
        with self._bulk_lock:
            if precision not in self._bulk_models:
                self._bulk_models[precision] = self._compile(precision, "THROUGHPUT")
            compiled = self._bulk_models[precision]
            count = REQUESTS_PER_STREAM * int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
            idle = [compiled.create_infer_request() for _ in range(count)]
            in_flight: deque[tuple[Any, np.ndarray]] = deque()
            output = self.config.output

            def collect_oldest() -> None:
                request, rows = in_flight.popleft()
                request.wait()
                out[rows] = request.get_tensor(output).data
                idle.append(request)

            try:
                for rows, features in batches:
                    if not idle:
                        collect_oldest()
                    request = idle.pop()
                    request.start_async(self._feeds(features))
                    in_flight.append((request, rows))
            finally:
                while in_flight:
                    collect_oldest()


CALIBRATION_FIELDS = ("title", "description", "text")


def read_calibration_texts(path: str | Path, fields: Sequence[str] = CALIBRATION_FIELDS) -> tuple[list[str], int]:
    """(texts, rows skipped for having no text) of a calibration file: JSONL whose rows' `fields` are joined as a
    report is indexed (title. description), or plain text, one text a line. A line that is not JSON in a .jsonl
    file is a `DataError` naming the file and line."""
    path = Path(path)
    texts, skipped = [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if path.suffix == ".jsonl":
            try:
                row = json.loads(line) if line.strip() else {}
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: not JSON ({exc.msg})") from None
            line = join_fields(row, fields) if isinstance(row, dict) else ""
        if line.strip():
            texts.append(line.strip())
        else:
            skipped += 1
    return texts, skipped
