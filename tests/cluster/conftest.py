"""A real three-node Ray cluster on this machine, shared by every multi-node test.

Multi-node tests never connect the pytest process to this cluster: the session-wide
`ray_session` fixture may already hold a local Ray, and one process can be the driver of
only one cluster. Each test instead runs its driver as a subprocess with
`cluster.driver_env()` (RAY_ADDRESS set), exactly as `ray job submit` would, and
inspects the cluster from outside through the State API, MLflow and shared storage.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from lmplatform.testing.local_cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
WORKER_NODES = ("node_a", "node_b")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is `cluster`: a three-node cluster on this machine, with nodes killed and brought back, is a
    heavy run that `make test` leaves to `make test-cluster` (about 4 minutes on 2 cores)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.cluster)


# Package scope: torn down before the rest of the suite, so no test outside tests/cluster
# ever sees two Ray instances on this machine.
@pytest.fixture(scope="package")
def local_cluster() -> Iterator[LocalCluster]:
    """Head (1 CPU: the driver's Train controller, data pre-flight) + node_a + node_b (1 CPU each).

    A test that kills a node must bring it back with `cluster.restart_node(name)`, so
    later tests see the full cluster again.
    """
    cluster = LocalCluster(head_cpus=1).start()
    try:
        for name in WORKER_NODES:
            cluster.add_node(name, num_cpus=1)
        yield cluster
    finally:
        cluster.stop()
    assert not cluster.stray_processes(), "processes of the test cluster outlived it"


def run_driver(cluster: LocalCluster, args: Sequence[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a driver script (e.g. ray_jobs/train.py) against the cluster; output is captured."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=cluster.driver_env(**env),
                          capture_output=True, text=True, check=False)


def last_json(stdout: str) -> dict:
    """The JSON object a CLI command prints at the end of its output."""
    start = stdout.rfind("\n{")
    return json.loads(stdout[start + 1 if start >= 0 else 0:])
