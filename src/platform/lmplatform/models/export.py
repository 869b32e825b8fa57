"""Model folders for tools outside lmplatform: every export format by name, and `export_model`.

Each format is a module under `models/exports/` with an `ExportFormatSpec` (models/export_spec.py): adding one is
its module and one line in `BUILTIN` below, or `register(SPEC)` from a user's module
(`lmplatform.register_export_format`). `lmp export --format`, a run's `tracking.exports` and `export_model` read
this registry. A classifier folder (encoder + MLP head) exports its encoder; the head is not part of any format.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from lmplatform.models.export_spec import ExportError, ExportFormatSpec, ExportOptions, ExportResult
from lmplatform.models.exports import onnx, openvino, sentence_transformers
from lmplatform.models.kind import CROSS_ENCODER, ENCODER, ModelKind
from lmplatform.models.resolve import resolve_model_path
from lmplatform.registry import Registry

BUILTIN: tuple[ExportFormatSpec, ...] = (sentence_transformers.SPEC, onnx.ONNX, onnx.ONNX_INT8, openvino.OPENVINO,
                                         openvino.OPENVINO_INT8)

_REGISTRY: Registry[ExportFormatSpec] = Registry("export format", BUILTIN)

format_specs = _REGISTRY.specs
format_names = _REGISTRY.names
register = _REGISTRY.register
unregister = _REGISTRY.unregister


def format_spec(name: str) -> ExportFormatSpec:
    """The format called `name` (an `ExportError` naming the registered ones otherwise)."""
    try:
        return _REGISTRY.get(name)
    except KeyError as exc:
        raise ExportError(f"unknown format {name!r}; allowed: {', '.join(format_names())}") from exc


def model_kind(folder: Path) -> ModelKind:
    """A one-logit sequence classifier is a cross-encoder; anything else is read as an encoder (a bi-encoder's)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    architectures = config.get("architectures") or []
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    if any(a.endswith("ForSequenceClassification") for a in architectures) and labels == 1:
        return CROSS_ENCODER
    return ENCODER


def export_model(model: str | Path, fmt: str, out: str | Path, keep_fp32: Optional[Sequence[str]] = None,
                 cross_encoder_max_length: int = 256, calibration: Optional[Sequence[str]] = None) -> ExportResult:
    """Export `model` (a folder, 'default' or a models:/ or runs:/ URI) as format `fmt` into `out` (created; must be
    empty).

    calibration: texts of the served domain, for a format that needs them (`openvino-int8`); unused elsewhere.
    """
    spec = format_spec(fmt)
    if spec.needs_calibration and not calibration:
        raise ExportError(f"{fmt} is static int8: it needs calibration texts of the served domain "
                          "(lmp export --calibration FILE)")
    source = resolve_model_path(str(model))
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder; choose a new --out")
    kind = model_kind(source)
    refusal = spec.refusal(kind, format_specs())
    if refusal:
        raise ExportError(f"{source}: {refusal}")
    result = spec.write(source, kind, out, ExportOptions(keep_fp32, cross_encoder_max_length, calibration))
    result.format = spec.name  # the name it was asked by, where one writer serves two names
    if (source / "classifier_head.pt").is_file():
        result.notes.append("the classifier head is not exported")
    return result
