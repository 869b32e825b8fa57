"""`lmplatform_encoder.json`: the pooling and maximum length saved beside an encoder's weights or exported graph.

Its own module so that the graph backends (onnx_backend, openvino_backend, graph), which the encoder imports, can
write it without importing the encoder back."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ENCODER_CONFIG = "lmplatform_encoder.json"


def write_encoder_config(path: Path, pooling: str, max_seq_length: int) -> None:
    (Path(path) / ENCODER_CONFIG).write_text(json.dumps({"pooling": pooling, "max_seq_length": max_seq_length}, indent=2))


def read_encoder_config(path: Path) -> dict[str, Any]:
    """The saved settings ({} when the folder has none: a plain Hugging Face model)."""
    record = Path(path) / ENCODER_CONFIG
    return json.loads(record.read_text()) if record.is_file() else {}
