"""cluster.yaml passes the validation `ray up` runs before it creates anything."""
from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"
REQUIREMENT_FILE = "lmplatform-requirement.txt"


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


def test_cluster_yaml_passes_rays_validation(cluster_config) -> None:
    prepared = validate_like_ray_up(cluster_config)
    types = prepared["available_node_types"]
    assert types[prepared["head_node_type"]]["resources"].get("GPU", 0) == 0  # no GPU paid for on the head
    gpu = [t for t in types.values() if t["resources"].get("GPU")]
    assert gpu and all(t["node_config"]["InstanceType"] == "g4dn.xlarge" for t in gpu)  # T4
    cpu_serve = [t for t in types.values() if "serve_node" in t["resources"]]
    assert cpu_serve and all(not t["resources"].get("GPU") for t in cpu_serve)
    assert sum(t.get("min_workers", 0) for t in types.values()) <= prepared["max_workers"]
    assert prepared["idle_timeout_minutes"] > 0 and prepared["upscaling_speed"] > 0


def run_like_ray_up(command: str, home: Path) -> subprocess.CompletedProcess:
    """A setup command as `ray up` runs it on a node: inside Ray's own wrapper (an interactive
    login bash that sources ~/.bashrc and runs the command in a subshell), here with HOME in tmp."""
    from ray.autoscaler._private.command_runner import _with_interactive

    return subprocess.run(" ".join(_with_interactive(command)), shell=True, executable="/bin/bash", cwd=home,
                          env={**os.environ, "HOME": str(home)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)


def with_values(command: str, commit: str | None = None, repo: str | None = None) -> str:
    """The check command with LMP_COMMIT / LMP_REPO set as a user would (the assignments only)."""
    if commit is not None:
        command = re.sub(r"LMP_COMMIT=[^;]*;", f"LMP_COMMIT={commit};", command, count=1)
    if repo is not None:
        command = re.sub(r"LMP_REPO=[^;]*;", f"LMP_REPO={repo};", command, count=1)
    return command


def test_the_template_stops_ray_up_with_a_message_until_a_commit_is_set(cluster_config, tmp_path) -> None:
    check = cluster_config["setup_commands"][0]
    done = run_like_ray_up(check, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cluster.yaml is still the template" in done.stderr
    assert "LMP_COMMIT to the full SHA of the commit to deploy (git rev-parse HEAD)" in done.stderr
    assert "LMP_COMMIT=REPLACE_WITH_COMMIT_SHA" in done.stderr  # says what it found
    assert not (tmp_path / REQUIREMENT_FILE).exists()


def test_a_set_commit_and_repository_pin_the_install(cluster_config, tmp_path) -> None:
    repo = "https://git.example.com/team/lmplatform.git"
    done = run_like_ray_up(with_values(cluster_config["setup_commands"][0], SHA, repo), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / REQUIREMENT_FILE).read_text() == f"lmplatform @ git+{repo}@{SHA}\n"


@pytest.mark.parametrize(("commit", "repo"), [
    ("main", "https://git.example.com/team/lmplatform.git"),  # a branch moves: not reproducible
    (SHA[:7], "https://git.example.com/team/lmplatform.git"),  # an abbreviated SHA can become ambiguous
    (SHA, None),  # the template's repository
])
def test_a_branch_short_sha_or_template_repository_is_refused(cluster_config, tmp_path, commit, repo) -> None:
    done = run_like_ray_up(with_values(cluster_config["setup_commands"][0], commit, repo), tmp_path)
    assert done.returncode == 1 and "cluster.yaml is still the template" in done.stderr
    assert not (tmp_path / REQUIREMENT_FILE).exists()


def test_the_check_runs_before_anything_is_installed_and_the_install_reads_its_pin(cluster_config) -> None:
    check, *installs = cluster_config["setup_commands"]
    assert "REPLACE_WITH_COMMIT_SHA" in check and f"> ~/{REQUIREMENT_FILE}" in check
    assert all(c.startswith("pip install") for c in installs)
    assert installs[-1].endswith(f"-r ~/{REQUIREMENT_FILE}")  # the commit is written once, in the check
    assert not any("git+" in c or "REPLACE_WITH" in c for c in installs)


def test_cluster_yaml_runs_our_ray_and_mounts_existing_folders(cluster_config) -> None:
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
def test_a_broken_cluster_yaml_fails_validation(cluster_config, mutate, message) -> None:
    broken = copy.deepcopy(cluster_config)
    mutate(broken)
    with pytest.raises(Exception, match=re.escape(message)):
        validate_like_ray_up(broken)
