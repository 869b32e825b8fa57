"""deploy/rayjob.yaml is a well-formed KubeRay RayJob whose entrypoint runs a job of this repository."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rayjob() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())


def test_rayjob_has_the_structure_kuberay_requires(rayjob) -> None:  # noqa: ANN001
    assert rayjob["apiVersion"] == "ray.io/v1" and rayjob["kind"] == "RayJob"
    assert rayjob["metadata"]["name"]
    spec = rayjob["spec"]
    cluster = spec["rayClusterSpec"]
    import ray

    assert cluster["rayVersion"] == ray.__version__  # the image's Ray must match the driver's
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    assert len(head) == 1 and head[0]["image"]
    assert "nvidia.com/gpu" not in head[0]["resources"].get("limits", {})
    groups = cluster["workerGroupSpecs"]
    assert groups and all(g["groupName"] and g["template"]["spec"]["containers"] for g in groups)
    gpu = [g for g in groups if g["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu")]
    assert gpu, "no GPU worker group"
    for group in groups:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert set(runtime_env) <= {"working_dir", "env_vars", "pip", "py_modules", "excludes"}
    assert runtime_env["env_vars"]["RAY_AUTH_MODE"] == "disabled"


def test_rayjob_entrypoint_is_a_job_of_this_repository_with_a_valid_config(rayjob) -> None:  # noqa: ANN001
    from lmplatform.config import load_run_config

    argv = shlex.split(rayjob["spec"]["entrypoint"])
    assert argv[0] == "python" and argv[1].startswith("ray_jobs/")
    assert (ROOT / argv[1]).is_file(), f"{argv[1]} is not in ray_jobs/"
    config = ROOT / argv[argv.index("--config") + 1]
    assert config.is_file()
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    cfg = load_run_config(config, overrides)  # raises ConfigError naming the field if the manifest drifts
    assert cfg.scaling.use_gpu and cfg.scaling.num_workers == 2
    assert cfg.checkpoint.storage_path.startswith("s3://")  # shared storage, see docs/cluster.md
