"""The Python API (lmplatform/api.py and the package's lazy names): what a user may call without the `lmp` command."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import lmplatform


def test_every_public_name_resolves_and_importing_the_package_loads_none_of_them() -> None:
    for name in lmplatform.__all__:
        assert getattr(lmplatform, name) is not None
    assert sorted(dir(lmplatform)) == sorted(lmplatform.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Trainer'"):
        lmplatform.Trainer  # noqa: B018 - internal: not part of the surface
    modules = {p.stem for p in Path(lmplatform.__file__).parent.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert not modules & set(lmplatform.__all__)  # a submodule, once imported, would hide the name
    probe = "import sys, lmplatform; print(sorted(m for m in ('torch', 'ray', 'mlflow', 'lmplatform.api') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_a_bad_config_fails_before_ray_starts_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("model: {name_or_path: default}\nobjective: {name: biencoder}\ndata: {train_paths: [x.jsonl]}\n")
    with pytest.raises(Exception, match="optim.lr"):
        lmplatform.run_training(config, ["optim.lr=-1"])
    with pytest.raises(Exception, match="stages"):
        lmplatform.run_pipeline(config)  # a run config is no pipeline


def test_export_writes_a_folder_the_encoder_loads_with_the_same_vectors(tiny_bert: Path, tmp_path: Path) -> None:
    import numpy as np

    lmplatform.export(tiny_bert, tmp_path / "onnx", "onnx")
    texts = ["printer jams", "vpn drops every hour"]
    exported = lmplatform.Encoder.from_pretrained(tmp_path / "onnx", backend="onnx").encode(texts)
    assert np.allclose(exported, lmplatform.Encoder.from_pretrained(tiny_bert).encode(texts), atol=1e-5)
