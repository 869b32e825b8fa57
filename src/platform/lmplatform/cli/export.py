"""`lmp export`: a model as a sentence-transformers, ONNX or OpenVINO folder, fp32 or int8 (see lmplatform.models.export)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmplatform.cli.common import TRACKING_URI_HELP, fail, user_errors
from lmplatform.models.export import ExportError, export_model, format_names, format_spec
from lmplatform.models.resolve import download_model
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.tracking.exports import log_export, source_run


def export(
    model: str = typer.Option(..., "--model", "-m", help="models:/<name>@<alias>, models:/<name>/<version>, runs:/..., "
                              "a model folder, or 'default'."),
    fmt: str = typer.Option(..., "--format", "-f", help="; ".join(f"{name}: {format_spec(name).description}"
                                                                   for name in format_names())
                            + "; or a format registered from outside the package (package.module:SPEC)."),
    out: Path = typer.Option(..., "--out", "-o", help="A new (or empty) folder."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="openvino-int8: texts of the served domain "
                                               "to calibrate on (dev texts, not test): JSONL with title/description/"
                                               "text fields, or one text a line."),
    log: bool = typer.Option(False, "--log", help="Also log the export to the model's MLflow run, beside model/ "
                             "(models:/ and runs:/ only)."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
) -> None:
    """Export a model for sentence-transformers, TEI/Infinity or ONNX Runtime; print what the folder holds and how
    to load it."""
    from mlflow.exceptions import MlflowException

    from lmplatform.models.openvino_backend import MissingExtra, read_calibration_texts

    try:
        spec = format_spec(fmt)
    except ExportError:
        fail(f"--format {fmt!r}: allowed: {', '.join(format_names())}")
        return
    if (calibration is not None) != spec.needs_calibration:
        calibrated = [name for name in format_names() if format_spec(name).needs_calibration]
        fail(f"--calibration FILE goes with --format {' or '.join(calibrated)} (static int8 is calibrated on texts of "
             "the served domain), and with no other format")
    run_id = None
    try:
        texts = None
        if calibration is not None:
            texts, skipped = read_calibration_texts(calibration)
            typer.echo(f"[lmp] calibration: {len(texts)} texts from {calibration}" + (f", {skipped} empty rows skipped"
                                                                                   if skipped else ""))
        if log:
            run_id = source_run(model, tracking_uri)
            if run_id is None:
                fail(f"--log needs a models:/ or runs:/ model (its run receives the export); {model} is neither")
        if model.startswith(("models:/", "runs:/")) and tracking_uri:
            model = str(download_model(model, tracking_uri))
        result = export_model(model, fmt, out, calibration=texts)
    except (*user_errors(), ExportError, MissingExtra, MlflowException) as exc:
        fail(str(getattr(exc, "message", exc)))
        return
    typer.echo(f"[lmp] {result.describe()}")
    typer.echo(f"[lmp] load it: {spec.how_to_load(result)}")
    if run_id is not None:
        from mlflow.tracking import MlflowClient

        uri = log_export(MlflowClient(resolve_tracking_uri(tracking_uri)), run_id, result)
        typer.echo(f"[lmp] logged to MLflow run {run_id}: {uri}")
