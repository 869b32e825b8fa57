"""A real multi-node Ray cluster on one machine: a head plus worker nodes.

Each node is a `ray start --block` process in its own process group, so a node can be
killed by PID (a node failure) and the whole cluster stopped without touching any other
Ray on the machine. Never use `ray stop` here: it kills every Ray process of every user.

Used by the multi-node tests (tests/cluster/) and by bench/cluster_throughput.py.
Address: Ray 2.60 does not let nodes join over loopback. With
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (how single-node Ray is kept on 127.0.0.1 elsewhere
in this project) `ray start --address` refuses to join; with it at 1 (Ray's default on
Linux) every "127.0.0.1" is rewritten to the machine's own address. So the nodes, and
every driver that joins them, run with 1 and use the machine's address (`node_ip()`),
consistently. The dashboard alone stays on 127.0.0.1.

Drivers do not connect from this process: they run as subprocesses with `driver_env()`
(RAY_ADDRESS set), exactly like a job submitted to a real cluster.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lmplatform.runtime import RUNTIME_ENV_DEFAULTS

LOOPBACK = "127.0.0.1"
MULTI_NODE_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_AUTH_MODE": "disabled"}
# The object store is memory-mapped up front; the default (30% of RAM per node) is far
# more than toy jobs need on a shared machine. 75 MB is Ray's minimum.
DEFAULT_OBJECT_STORE_BYTES = 120 * 1024 * 1024
PROCESS_GROUPS_FILE = "process-groups.txt"

# Runs beside the cluster and kills its process groups if the process that started the
# cluster dies without stopping it (a killed pytest, a Ctrl-C at the wrong moment), so a
# crashed test session never leaves Ray nodes behind. It exits once stop() removes the file.
_WATCHDOG = """
import os, signal, sys, time
owner, groups = int(sys.argv[1]), sys.argv[2]
while os.path.exists(groups):
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        for line in open(groups).read().split():
            try:
                os.killpg(int(line), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        break
    time.sleep(1)
"""


def node_ip() -> str:
    """The address Ray itself picks for this machine in multi-node mode."""
    from ray._private.services import node_ip_address_from_perspective

    return str(node_ip_address_from_perspective(None))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalNode:
    """One `ray start --block` process group."""

    name: str
    num_cpus: float
    resources: dict[str, float]
    process: subprocess.Popen
    log_path: Path
    is_head: bool = False
    node_id: Optional[str] = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class LocalCluster:
    """Start with `start()` (or use as a context manager); stop with `stop()`.

    `head_cpus` defaults to 1: the head is where the Train controller, Ray Data's read and
    map tasks and the driver's own tasks land when the worker nodes are busy training.
    """

    head_cpus: float = 1
    head_resources: dict[str, float] = field(default_factory=dict)
    object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES
    temp_dir: Optional[Path] = None
    start_timeout_s: float = 240.0
    nodes: dict[str, LocalNode] = field(default_factory=dict)
    gcs_port: int = 0
    host: str = ""
    dashboard_port: int = 0
    _owns_temp_dir: bool = False
    _watchdog: Optional[subprocess.Popen] = None
    _retired_ids: set = field(default_factory=set)  # ids of killed nodes the GCS may still list

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> "LocalCluster":
        if self.temp_dir is None:
            # Short: Ray's unix sockets live under it and paths are limited to 107 bytes.
            self.temp_dir = Path(tempfile.mkdtemp(prefix="lmp-rc-", dir="/tmp"))
            self._owns_temp_dir = True
        self.host = self.host or node_ip()
        groups = self.temp_dir / PROCESS_GROUPS_FILE
        groups.write_text("")
        self._watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(groups)],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        try:
            self._launch("head", self.head_cpus, self.head_resources, head=True)
            self.wait_for_nodes(1)
        except BaseException:
            self.stop()
            raise
        return self

    def add_node(self, name: str, num_cpus: float = 1, resources: Optional[dict[str, float]] = None,
                 wait: bool = True) -> LocalNode:
        """Start a worker node with the custom resource `{name: 1}` plus `resources`."""
        if name in self.nodes:
            raise ValueError(f"a node called {name!r} already exists")
        node = self._launch(name, num_cpus, {name: 1, **(resources or {})}, head=False)
        if wait:
            self.wait_for_nodes(len(self.alive_nodes()))
        return node

    def restart_node(self, name: str) -> LocalNode:
        """Start a fresh node in place of a killed one (as an autoscaler would replace it)."""
        old = self.nodes[name]
        if old.alive():
            raise ValueError(f"node {name} is still running")
        del self.nodes[name]
        if old.node_id:
            self._retired_ids.add(old.node_id)
        extra = {k: v for k, v in old.resources.items() if k != name}
        return self.add_node(name, old.num_cpus, extra)

    def kill_node(self, name: str) -> int:
        """SIGKILL a node's whole process group (raylet, agents, its workers): a node failure."""
        node = self.nodes[name]
        _kill_group(node.process)
        return node.pid

    def stop(self) -> None:
        """Kill every process this cluster started, head last, and check none is left."""
        for node in sorted(self.nodes.values(), key=lambda n: n.is_head):
            _kill_group(node.process)
        leftovers = self.stray_processes()
        for pid in leftovers:  # workers that left their node's process group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while self.stray_processes() and time.time() < deadline:
            time.sleep(0.2)
        if self.temp_dir is not None:
            (self.temp_dir / PROCESS_GROUPS_FILE).unlink(missing_ok=True)  # ends the watchdog
        if self._watchdog is not None:
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
        if self._owns_temp_dir and self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- addresses ---------------------------------------------------------------
    @property
    def address(self) -> str:
        """The GCS address drivers connect to (RAY_ADDRESS)."""
        return f"{self.host}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard (State API and job submission)."""
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    def driver_env(self, **extra: str) -> dict[str, str]:
        """Environment for a driver subprocess that joins this cluster."""
        return {**_ray_env(), "RAY_ADDRESS": self.address, **extra}

    def alive_nodes(self) -> list[LocalNode]:
        return [n for n in self.nodes.values() if n.alive()]

    def node_by_id(self, node_id: str) -> LocalNode:
        for node in self.nodes.values():
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node of this cluster has id {node_id}")

    # ---- state -------------------------------------------------------------------
    def state_nodes(self) -> list[dict[str, Any]]:
        """Nodes as the cluster itself sees them (dashboard REST API of the State API)."""
        return self._state_api("nodes")

    def state_actors(self, class_name: Optional[str] = None) -> list[dict[str, Any]]:
        query = f"filter_keys=class_name&filter_predicates=%3D&filter_values={class_name}" if class_name else ""
        return self._state_api("actors", query)

    def wait_for_nodes(self, count: int) -> None:
        """Wait until `count` nodes are ALIVE and every started node is matched to its node id."""
        deadline = time.time() + self.start_timeout_s
        last_error: Optional[BaseException] = None
        while time.time() < deadline:
            for node in self.nodes.values():
                if not node.alive() and node.node_id is None:
                    raise RuntimeError(f"ray node {node.name} exited during start-up; log: {node.log_path}\n"
                                       + node.log_path.read_text(errors="replace")[-3000:])
            try:
                alive = [n for n in self.state_nodes()
                         if n.get("state") == "ALIVE" and n["node_id"] not in self._retired_ids]
                self._match_node_ids(alive)
                if len(alive) >= count and all(n.node_id for n in self.alive_nodes()):
                    return
            except OSError as error:  # dashboard not up yet
                last_error = error
            time.sleep(0.5)
        raise TimeoutError(f"{count} Ray node(s) not alive after {self.start_timeout_s:.0f} s "
                           f"(temp dir {self.temp_dir}; last error: {last_error})")

    # ---- internals -----------------------------------------------------------------
    def _launch(self, name: str, num_cpus: float, resources: dict[str, float], head: bool) -> LocalNode:
        assert self.temp_dir is not None
        ray_cli = str(Path(sys.executable).with_name("ray"))
        args = [
            ray_cli, "start", "--block", "--disable-usage-stats",
            f"--node-ip-address={self.host}",
            f"--num-cpus={num_cpus}", "--num-gpus=0",
            f"--resources={json.dumps(resources)}",
            f"--object-store-memory={self.object_store_bytes}",
            # Several nodes share this machine: every per-node port must differ.
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}",
        ]
        if head:
            args += [
                "--head", f"--port={self.gcs_port}", f"--temp-dir={self.temp_dir}",
                "--include-dashboard=true", f"--dashboard-host={LOOPBACK}", f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port()}",
            ]
        else:
            args += [f"--address={self.address}"]
        log_path = self.temp_dir / f"node-{name}.log"
        with log_path.open("wb") as log:
            # Own session and process group: killing the group is a node failure, and a
            # Ctrl-C in the terminal running pytest does not reach the nodes directly.
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=_ray_env(),
                                       start_new_session=True)
        with (self.temp_dir / PROCESS_GROUPS_FILE).open("a") as groups:
            groups.write(f"{process.pid}\n")
        node = LocalNode(name, num_cpus, resources, process, log_path, is_head=head)
        self.nodes[name] = node
        return node

    def _match_node_ids(self, alive: list[dict[str, Any]]) -> None:
        for state in alive:
            if state["node_id"] in self._retired_ids:
                continue
            total = state.get("resources_total") or {}
            for node in self.nodes.values():
                if node.node_id:
                    continue
                if node.is_head and state.get("is_head_node"):
                    node.node_id = state["node_id"]
                elif not node.is_head and total.get(node.name) == 1:
                    node.node_id = state["node_id"]

    def _state_api(self, resource: str, query: str = "") -> list[dict[str, Any]]:
        url = f"{self.dashboard_url}/api/v0/{resource}?limit=10000&detail=true" + (f"&{query}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback only)
            body = json.load(response)
        return list(body["data"]["result"]["result"])

    def stray_processes(self) -> list[int]:
        """PIDs of processes whose command line names this cluster's (unique) temp dir."""
        if self.temp_dir is None:
            return []
        markers = (str(self.temp_dir).encode(),)
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if any(marker in cmdline for marker in markers):
                found.append(int(entry.name))
        return found


def _ray_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # Every process must have these (see runtime.py): loopback ports and no token auth.
    env.update({k: os.environ.get(k, v) for k, v in RUNTIME_ENV_DEFAULTS.items()})
    env.update(MULTI_NODE_ENV)  # every process of the cluster and its drivers alike
    # A raylet joining a busy head may take longer than the default 30 s to register
    # ("GCS cannot find the node ..."), which kills the new node; seen at load 50+ on 2 cores.
    env.setdefault("RAY_raylet_start_wait_time_s", "180")
    return env


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
