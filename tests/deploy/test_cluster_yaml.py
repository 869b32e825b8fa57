"""cluster.yaml passes the validation `ray up` runs before it creates anything."""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def validate_like_ray_up(config: dict[str, Any]) -> dict[str, Any]:
    """Ray's own checks, in `ray up` order: fill defaults, then the JSON schema and cross-field rules.

    (`ray up` next asks AWS to bootstrap IAM roles and subnets; that needs credentials.)
    """
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.fixture(scope="module")
def cluster_config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_cluster_yaml_passes_rays_validation(cluster_config) -> None:  # noqa: ANN001
    prepared = validate_like_ray_up(cluster_config)
    types = prepared["available_node_types"]
    assert types[prepared["head_node_type"]]["resources"].get("GPU", 0) == 0  # no GPU paid for on the head
    gpu = [t for t in types.values() if t["resources"].get("GPU")]
    assert gpu and all(t["node_config"]["InstanceType"] == "g4dn.xlarge" for t in gpu)  # T4
    cpu_serve = [t for t in types.values() if "serve_node" in t["resources"]]
    assert cpu_serve and all(not t["resources"].get("GPU") for t in cpu_serve)
    assert sum(t.get("min_workers", 0) for t in types.values()) <= prepared["max_workers"]
    assert prepared["idle_timeout_minutes"] > 0 and prepared["upscaling_speed"] > 0


def test_cluster_yaml_installs_a_pinned_commit_and_mounts_existing_folders(cluster_config) -> None:  # noqa: ANN001
    installs = [c for c in cluster_config["setup_commands"] if "lmplatform @ git+" in c]
    assert len(installs) == 1
    ref = re.search(r"\.git@([^\"'\s]+)", installs[0])
    assert ref and ref.group(1) not in {"main", "master", "HEAD"}, "install a pinned commit, not a branch"
    assert cluster_config["docker"]["image"].startswith("rayproject/ray:2.60.0")  # the Ray version we pin
    for remote, local in cluster_config["file_mounts"].items():
        assert (ROOT / local).is_dir(), f"file_mounts {remote}: {local} does not exist"


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda c: c.update(max_workers="six"), "six"),
    (lambda c: c["available_node_types"]["gpu_worker"].pop("node_config"), "node_config"),
    (lambda c: c["available_node_types"]["gpu_worker"]["resources"].update(GPU=0.5), "0.5"),
    (lambda c: c.update(head_node_type="no_such_type"), "head_node_type"),
    (lambda c: c.update(idle_timeout_minute=10), "idle_timeout_minute"),
    (lambda c: c["available_node_types"]["cpu_worker"].update(min_workers=9), "max_workers"),
])
def test_a_broken_cluster_yaml_fails_validation(cluster_config, mutate, message) -> None:  # noqa: ANN001
    broken = copy.deepcopy(cluster_config)
    mutate(broken)
    with pytest.raises(Exception, match=re.escape(message)):
        validate_like_ray_up(broken)
