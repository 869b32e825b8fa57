"""deploy/rayjob.yaml is a well-formed KubeRay RayJob whose entrypoint runs a job of this repository,
and which refuses to start from the template's image until a commit is set."""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def rayjob() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())


def test_rayjob_has_the_structure_kuberay_requires(rayjob) -> None:
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


def test_rayjob_entrypoint_is_a_job_of_this_repository_with_a_valid_config(rayjob) -> None:
    from lmplatform.objectives.run_config import load_run_config

    argv = shlex.split(rayjob["spec"]["entrypoint"])
    assert argv[0] == "python" and argv[1].startswith("ray_jobs/")
    assert (ROOT / argv[1]).is_file(), f"{argv[1]} is not in ray_jobs/"
    config = ROOT / argv[argv.index("--config") + 1]
    assert config.is_file()
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    cfg = load_run_config(config, overrides)  # raises ConfigError naming the field if the manifest drifts
    assert cfg.scaling.use_gpu and cfg.scaling.num_workers == 2
    assert cfg.checkpoint.storage_path.startswith("s3://")  # shared storage, see docs/cluster.md


def pod_specs(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"]["spec"],
            *(group["template"]["spec"] for group in cluster["workerGroupSpecs"])]


def run_commit_check(rayjob: dict[str, Any], image: str) -> subprocess.CompletedProcess:
    """The head's `require-commit` init container, run as the kubelet would: its command and args,
    with its env (LMP_IMAGE set to `image`), by a POSIX sh (busybox's in the pod, dash here)."""
    check = pod_specs(rayjob)[0]["initContainers"][0]
    return subprocess.run([*check["command"], *check["args"]], env={"PATH": os.environ["PATH"], "LMP_IMAGE": image},
                          capture_output=True, text=True)


def test_every_pod_checks_its_image_first_and_all_share_one_image(rayjob) -> None:
    images = set()
    for spec in pod_specs(rayjob):
        first = spec["initContainers"][0]
        assert first["name"] == "require-commit" and first["image"].startswith("busybox:")
        assert {e["name"]: e["value"] for e in first["env"]}["LMP_IMAGE"] == spec["containers"][0]["image"]
        images.add(spec["containers"][0]["image"])
    assert len(images) == 1, f"the pods run different images: {images}"  # set once, at &image


def test_the_template_image_stops_the_pods_with_a_message(rayjob) -> None:
    template = pod_specs(rayjob)[0]["containers"][0]["image"]
    assert template.endswith(":REPLACE_WITH_COMMIT_SHA")
    done = run_commit_check(rayjob, template)
    assert done.returncode == 1
    assert "deploy/rayjob.yaml is still the template" in done.stderr and template in done.stderr
    assert "tagged with the commit it was built from (git rev-parse HEAD)" in done.stderr


@pytest.mark.parametrize("image", [f"ghcr.io/acme/lmplatform:{SHA}", f"registry.acme.io:5000/ml/lmplatform:{SHA[:12]}"])
def test_an_image_tagged_with_a_commit_passes(rayjob, image: str) -> None:
    done = run_commit_check(rayjob, image)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("image", [
    "ghcr.io/acme/lmplatform:latest",  # moves
    "ghcr.io/acme/lmplatform",  # no tag: latest
    "registry.acme.io:5000/ml/lmplatform",  # a registry port is not a tag
    f"ghcr.io/your-org/lmplatform:{SHA}",  # the template's registry
])
def test_an_image_not_pinned_to_a_commit_is_refused(rayjob, image: str) -> None:
    done = run_commit_check(rayjob, image)
    assert done.returncode == 1 and "is still the template" in done.stderr
