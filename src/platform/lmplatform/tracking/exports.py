"""Exports logged to MLflow beside a run's Hugging Face folder `model/`.

Each format lands under its own artifact path (`ExportFormatSpec.artifact`), so a registered version's run
holds `model/` and, for example, `model-onnx/`; `lmp export --log` and a training run with
`tracking.exports` both write them. The run's `lmp.exports` tag lists what it holds.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional

from lmplatform.models.export import ExportResult, export_model, format_spec
from lmplatform.runtime import resolve_tracking_uri

EXPORTS_TAG = "lmp.exports"


def log_export(client: Any, run_id: str, result: ExportResult) -> str:
    """Log an export's folder to `run_id` and record it in the run's tag; the artifact URI."""
    path = format_spec(result.format).artifact
    client.log_artifacts(run_id, str(result.folder), path)
    held = set(filter(None, client.get_run(run_id).data.tags.get(EXPORTS_TAG, "").split(",")))
    client.set_tag(run_id, EXPORTS_TAG, ",".join(sorted(held | {result.format})))
    return f"{client.get_run(run_id).info.artifact_uri}/{path}"


def export_and_log(tracking_uri: str, run_id: str, model_dir: str | Path,
                   formats: Iterable[str]) -> dict[str, str]:
    """Export `model_dir` in each format and log it beside `model/` in `run_id`: {format: artifact URI}."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    logged: dict[str, str] = {}
    for fmt in dict.fromkeys(formats):
        with tempfile.TemporaryDirectory(prefix="lmp-export-") as tmp:
            result = export_model(model_dir, fmt, Path(tmp) / "export")
            logged[fmt] = log_export(client, run_id, result)
    return logged


def source_run(uri: str, tracking_uri: Optional[str] = None) -> Optional[str]:
    """The MLflow run behind models:/name@alias, models:/name/version or runs:/id/path; None for a folder."""
    from mlflow.tracking import MlflowClient

    if uri.startswith("runs:/"):
        return uri[len("runs:/"):].split("/", 1)[0]
    if not uri.startswith("models:/"):
        return None
    client = MlflowClient(resolve_tracking_uri(tracking_uri))
    spec = uri[len("models:/"):]
    if "@" in spec:
        name, alias = spec.split("@", 1)
        return client.get_model_version_by_alias(name, alias).run_id
    name, _, number = spec.partition("/")
    return client.get_model_version(name, number).run_id
