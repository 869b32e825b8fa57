"""A new export format is one module and one registration: this module is that module (a toy format writing a
model's static token embeddings, as Model2Vec-style tools load them), and `export_model`, `lmp export`, a run's
`tracking.exports` and the MLflow logging all take it from its spec, with no other change to the package."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from typer.testing import CliRunner

import lmplatform
from lmplatform.config.loader import ConfigError
from lmplatform.models import export as export_formats
from lmplatform.models.export_spec import ExportFormatSpec, ExportOptions, ExportResult, folder_files
from lmplatform.models.kind import ENCODER, ModelKind
from lmplatform.objectives.run_config import load_run_config

REPO = Path(__file__).resolve().parents[2]


def write(source: Path, kind: ModelKind, out: Path, options: ExportOptions) -> ExportResult:
    from lmplatform.models.encoder import Encoder

    encoder = Encoder.from_pretrained(source)
    table = encoder.backbone.get_input_embeddings().weight.detach().float().numpy()
    out.mkdir(parents=True)
    np.save(out / "embeddings.npy", table)
    (out / "vocab.json").write_text(json.dumps(encoder.tokenizer.get_vocab()))
    return ExportResult(STATIC.name, kind, out, folder_files(out), [f"{table.shape[0]} tokens x {table.shape[1]}"])


def how_to_load(result: ExportResult) -> str:
    return f"numpy.load({str(result.folder / 'embeddings.npy')!r})"


STATIC = ExportFormatSpec(name="static-embeddings", description="the token embedding table", write=write,
                          how_to_load=how_to_load, kinds=(ENCODER,))
# The same format named by its import path: a config may name it with no `register` call in any process.
BY_PATH = ExportFormatSpec(name=f"{__name__}:BY_PATH", description="the token embedding table", write=write,
                           how_to_load=how_to_load)


@pytest.fixture
def static_format() -> Iterator[ExportFormatSpec]:
    lmplatform.register_export_format(STATIC)
    yield STATIC
    export_formats.unregister(STATIC.name)


def test_a_registered_format_exports_and_lmp_export_says_how_to_load_it(static_format: ExportFormatSpec,
                                                                       tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.cli import app
    from lmplatform.models.encoder import Encoder

    result = lmplatform.export(tiny_bert, tmp_path / "api", fmt="static-embeddings")
    table = np.load(result.folder / "embeddings.npy")
    vocab = json.loads((result.folder / "vocab.json").read_text())
    assert table.shape == (len(vocab), Encoder.from_pretrained(tiny_bert).dim)
    assert result.files == ["embeddings.npy", "vocab.json"]
    done = CliRunner().invoke(app, ["export", "--model", str(tiny_bert), "--format", "static-embeddings",
                                    "--out", str(tmp_path / "cli")])
    assert done.exit_code == 0, done.output
    assert "exported as static-embeddings" in done.output and "load it: numpy.load(" in done.output
    bad = CliRunner().invoke(app, ["export", "--model", str(tiny_bert), "--format", "tflite", "--out", str(tmp_path / "t")])
    assert bad.exit_code == 2 and "openvino-int8, static-embeddings" in bad.output


def test_run_configs_name_registered_formats_and_refuse_unknown_ones(static_format: ExportFormatSpec) -> None:
    config = REPO / "configs" / "biencoder.yaml"
    assert load_run_config(config, ["tracking.exports=[static-embeddings]"]).tracking.exports == ["static-embeddings"]
    assert load_run_config(config, [f"tracking.exports=[{BY_PATH.name}]"]).tracking.exports == [BY_PATH.name]
    with pytest.raises(ConfigError, match="tracking.exports: unknown format 'tflite'; allowed: sentence-transformers"):
        load_run_config(config, ["tracking.exports=[tflite]"])
    with pytest.raises(ConfigError, match="openvino-int8 needs calibration texts"):
        load_run_config(config, ["tracking.exports=[openvino-int8]"])


def test_a_format_is_logged_under_its_own_artifact(static_format: ExportFormatSpec, tiny_bert: Path,
                                                  mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.tracking.exports import EXPORTS_TAG, export_and_log
    from lmplatform.tracking.mlflow_tracking import get_or_create_experiment

    client = MlflowClient(mlflow_uri)
    run_id = client.create_run(get_or_create_experiment(mlflow_uri, "static")).info.run_id
    logged = export_and_log(mlflow_uri, run_id, tiny_bert, ["static-embeddings", BY_PATH.name])
    assert logged["static-embeddings"].endswith("/model-static-embeddings")
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert artifacts == {"model-static-embeddings", f"model-{__name__}-BY_PATH"}
    assert client.get_run(run_id).data.tags[EXPORTS_TAG] == f"static-embeddings,{BY_PATH.name}"
