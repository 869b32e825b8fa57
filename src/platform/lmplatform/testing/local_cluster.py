"""A real multi-node Ray cluster on one machine, all on 127.0.0.1: a head plus worker nodes.

The nodes are made by `ray.cluster_utils.Cluster` (a head and extra raylets, each its own
Ray node with its own resources, object store and node id) inside a separate "cluster host"
process: `python -m lmplatform.testing.local_cluster serve ...`. Why a separate process: a process
can be the driver of one cluster only, and the process that starts the nodes (pytest, a
benchmark) may already hold another Ray. Why not `ray start --address`: in Ray 2.60 it
refuses to add a node with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, and with 1 it rewrites
127.0.0.1 to the machine's network address. `cluster_utils` does not have that check, so
every process (nodes, drivers, workers) runs with 0 and Ray stays on loopback.

The host writes the cluster's address, dashboard URL and each node's process ids to a JSON
state file, then serves requests (add / restart a node) passed as small JSON files in its
control folder. A node failure is simulated from outside by SIGKILL of the node's raylet and
every process under it (its agents and workers). `stop()` ends the host, which tears the
nodes down, then kills anything still naming the cluster's private temp dir. The host also
tears the cluster down if the process that started it dies. Never `ray stop` here: it
kills every Ray process of every user on the machine.

Drivers do not connect from the starting process: they run as subprocesses with
`driver_env()` (RAY_ADDRESS set), exactly like a job submitted to a real cluster.
Debugging: LMP_KEEP_CLUSTER_DIR=1 keeps the temp dir (Ray's logs, host.log) after stop().
"""
from __future__ import annotations

import argparse
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
# The object store is memory-mapped up front; the default (30% of RAM per node) is far
# more than toy jobs need on a shared machine. 75 MB is Ray's minimum.
DEFAULT_OBJECT_STORE_BYTES = 120 * 1024 * 1024
STATE_FILE = "cluster.json"
CONTROL_DIR = "control"


def free_port() -> int:
    """A free loopback port that is none of Ray's default ports: a Ray node takes those for the components
    it is given no port for (the dashboard agent's 52365 lies in the ephemeral range), and refuses to
    start when a port given to another component equals one of them."""
    from ray._private import ray_constants

    taken = {ray_constants.DEFAULT_PORT, ray_constants.DEFAULT_DASHBOARD_PORT,
             ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT}
    while True:
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


@dataclass
class LocalNode:
    """One Ray node of the cluster, as reported by the cluster host."""

    name: str
    num_cpus: float
    resources: dict[str, float]
    node_id: str
    node_ip: str
    raylet_pid: int
    pids: list[int]  # every process the host started for this node (raylet first)
    is_head: bool = False

    @property
    def pid(self) -> int:
        return self.raylet_pid

    def alive(self) -> bool:
        return _running(self.raylet_pid)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LocalNode":
        return cls(**data)


@dataclass
class LocalCluster:
    """Start with `start()` (or use as a context manager); stop with `stop()`.

    `head_cpus` defaults to 1: the head is where the Train controller, Ray Data's read and
    map tasks and the driver's own tasks land when the worker nodes are busy training.
    `dashboard=False` starts no dashboard (one process less, and its polling): `ray job submit`
    and the State API (`state_nodes`, `state_actors`, `wait_for_nodes`) need it. `log_monitor=False`
    starts no log monitor, which otherwise re-reads every worker's log folder ten times a second to
    forward the workers' output to the drivers' consoles.
    """

    head_cpus: float = 1
    head_resources: dict[str, float] = field(default_factory=dict)
    object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES
    temp_dir: Optional[Path] = None
    start_timeout_s: float = 240.0
    dashboard: bool = True
    log_monitor: bool = True
    nodes: dict[str, LocalNode] = field(default_factory=dict)
    address: str = ""
    dashboard_url: str = ""
    _owns_temp_dir: bool = False
    _host: Optional[subprocess.Popen] = None
    _retired: list = field(default_factory=list)  # nodes killed and replaced (their ids may still appear)
    _requests: int = 0

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> "LocalCluster":
        if self.temp_dir is None:
            # Short: Ray's unix sockets live under it and paths are limited to 107 bytes.
            self.temp_dir = Path(tempfile.mkdtemp(prefix="lmp-rc-", dir="/tmp"))
            self._owns_temp_dir = os.environ.get("LMP_KEEP_CLUSTER_DIR") != "1"
        (self.temp_dir / CONTROL_DIR).mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "lmplatform.testing.local_cluster", "serve", "--temp-dir", str(self.temp_dir),
                "--owner-pid", str(os.getpid()), "--head-cpus", str(self.head_cpus),
                "--head-resources", json.dumps(self.head_resources),
                "--object-store-bytes", str(self.object_store_bytes), "--start-timeout-s", str(self.start_timeout_s)]
        args += [] if self.dashboard else ["--no-dashboard"]
        args += [] if self.log_monitor else ["--no-log-monitor"]
        # Own session: a Ctrl-C in the terminal running pytest does not reach the nodes directly.
        with (self.temp_dir / "host.log").open("ab") as log:
            self._host = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=_ray_env(), start_new_session=True)
        try:
            state = self._wait_for_file(self.temp_dir / STATE_FILE)
            self.address, self.dashboard_url = state["address"], state["dashboard_url"]
            head = LocalNode.from_dict(state["node"])
            self.nodes[head.name] = head
            if self.dashboard:  # without one, the host waited for the head to register before writing its state
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
        node = LocalNode.from_dict(self._request({"op": "add", "name": name, "num_cpus": num_cpus,
                                                  "resources": {name: 1, **(resources or {})}}))
        self.nodes[name] = node
        if wait:
            self.wait_for_nodes(len(self.alive_nodes()))
        return node

    def restart_node(self, name: str) -> LocalNode:
        """Start a fresh node in place of a killed one (as an autoscaler would replace it)."""
        old = self.nodes[name]
        if old.alive():
            raise ValueError(f"node {name} is still running")
        node = LocalNode.from_dict(self._request({"op": "restart", "name": name}))
        self._retired.append(old)
        self.nodes[name] = node
        self.wait_for_nodes(len(self.alive_nodes()))
        return node

    def kill_node(self, name: str) -> int:
        """A node failure: SIGKILL the node's raylet and every process under it (agents, workers).

        Returns the raylet's PID. The processes are collected before the raylet dies, since
        its children are re-parented once it is gone.
        """
        node = self.nodes[name]
        if node.is_head:
            raise ValueError("killing the head ends the cluster; kill a worker node")
        victims = [node.raylet_pid, *_descendants(node.raylet_pid), *node.pids]
        for pid in dict.fromkeys(victims):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while any(_running(pid) for pid in victims) and time.time() < deadline:
            time.sleep(0.1)
        return node.raylet_pid

    def stop(self) -> None:
        """End the cluster host (it shuts the nodes down), then kill anything of this cluster left."""
        if self._host is not None and self._host.poll() is None:
            self._host.send_signal(signal.SIGTERM)
            try:
                self._host.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._host.kill()
                self._host.wait(timeout=10)
        for pid in self.stray_processes():  # e.g. workers of a killed node that outlived it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while self.stray_processes() and time.time() < deadline:
            time.sleep(0.2)
        if self._owns_temp_dir and self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- addresses ---------------------------------------------------------------
    def driver_env(self, **extra: str) -> dict[str, str]:
        """Environment for a driver subprocess that joins this cluster."""
        return {**_ray_env(), "RAY_ADDRESS": self.address, **extra}

    def alive_nodes(self) -> list[LocalNode]:
        return [n for n in self.nodes.values() if n.alive()]

    def node_by_id(self, node_id: str) -> LocalNode:
        for node in [*self.nodes.values(), *self._retired]:
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

    def resources_in_use(self, names: tuple[str, ...] = ("CPU", "GPU")) -> dict[str, dict[str, float]]:
        """Node name -> the `names` resources that tasks, actors or placement groups hold now.

        Read from the GCS's live resource view (what `ray status` shows), so no driver joins.
        Nodes holding nothing are left out: an idle cluster gives {}.
        """
        from ray.autoscaler.v2.sdk import get_cluster_status

        status = get_cluster_status(self.address)
        held: dict[str, dict[str, float]] = {}
        for node in [*status.active_nodes, *status.idle_nodes]:
            usage = {u.resource_name: u.used for u in (node.resource_usage.usage if node.resource_usage else [])
                     if u.resource_name in names and u.used > 0}
            if usage:
                try:
                    held[self.node_by_id(str(node.node_id)).name] = usage
                except KeyError:
                    held[str(node.node_id)] = usage
        return held

    def wait_until_idle(self, timeout_s: float = 120.0) -> None:
        """Until no node has a CPU or GPU held (released resources reach the GCS within a second or so)."""
        deadline = time.time() + timeout_s
        held = self.resources_in_use()
        while held and time.time() < deadline:
            time.sleep(0.5)
            held = self.resources_in_use()
        if held:
            raise TimeoutError(f"the cluster is still busy after {timeout_s:.0f} s: {held}")

    def wait_for_nodes(self, count: int) -> None:
        """Wait until the State API lists `count` ALIVE nodes, including every node started here."""
        deadline = time.time() + self.start_timeout_s
        last_error: Optional[BaseException] = None
        while time.time() < deadline:
            self._check_host()
            try:
                alive = {n["node_id"] for n in self.state_nodes() if n.get("state") == "ALIVE"}
                if len(alive) >= count and all(n.node_id in alive for n in self.alive_nodes()):
                    return
            except OSError as error:  # dashboard not up yet
                last_error = error
            time.sleep(0.5)
        raise TimeoutError(f"{count} Ray node(s) not alive after {self.start_timeout_s:.0f} s "
                           f"(temp dir {self.temp_dir}; last error: {last_error})")

    def stray_processes(self) -> list[int]:
        """PIDs of processes whose command line names this cluster's (unique) temp dir."""
        if self.temp_dir is None:
            return []
        marker = str(self.temp_dir).encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and _running(int(entry.name)):
                found.append(int(entry.name))
        return found

    # ---- internals -----------------------------------------------------------------
    def _request(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.temp_dir is not None
        self._requests += 1
        control = self.temp_dir / CONTROL_DIR
        _write_json(control / f"request-{self._requests:04d}.json", body)
        reply = self._wait_for_file(control / f"reply-{self._requests:04d}.json")
        if "error" in reply:
            raise RuntimeError(f"cluster host could not {body['op']} node {body.get('name')}: {reply['error']}")
        return dict(reply["node"])

    def _wait_for_file(self, path: Path) -> dict[str, Any]:
        deadline = time.time() + self.start_timeout_s
        while time.time() < deadline:
            if path.exists():
                return dict(json.loads(path.read_text()))
            self._check_host()
            time.sleep(0.2)
        raise TimeoutError(f"cluster host did not write {path} in {self.start_timeout_s:.0f} s")

    def _check_host(self) -> None:
        if self._host is not None and self._host.poll() is not None:
            assert self.temp_dir is not None
            log = (self.temp_dir / "host.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the cluster host exited ({self._host.returncode}); log:\n{log}")

    def _state_api(self, resource: str, query: str = "") -> list[dict[str, Any]]:
        url = f"{self.dashboard_url}/api/v0/{resource}?limit=10000&detail=true" + (f"&{query}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        return list(body["data"]["result"]["result"])


def _ray_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # Every process must have these (see runtime.py): loopback ports and no token auth.
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is forced to 0: at 1 Ray leaves loopback.
    env.update({k: os.environ.get(k, v) for k, v in RUNTIME_ENV_DEFAULTS.items()})
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # A raylet joining a busy head may take longer than the default 30 s to register
    # ("GCS cannot find the node ..."), which kills the new node; seen at load 50+ on 2 cores.
    env.setdefault("RAY_raylet_start_wait_time_s", "180")
    return env


def _running(pid: int) -> bool:
    """True if the process exists and is not a zombie (a killed child not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _write_json(path: Path, body: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(body))
    partial.rename(path)  # atomic: the reader never sees half a file


# ---- the cluster host (runs in its own process) ------------------------------------------
def _node_info(node: Any, name: str, num_cpus: float, resources: dict[str, float], head: bool) -> dict[str, Any]:
    raylet = node.all_processes["raylet"][0].process.pid
    pids = [raylet] + [info.process.pid for kind, infos in node.all_processes.items() if kind != "raylet"
                       for info in infos]
    return {"name": name, "num_cpus": num_cpus, "resources": resources, "node_id": node.node_id,
            "node_ip": node.node_ip_address, "raylet_pid": raylet, "pids": pids if not head else [raylet],
            "is_head": head}


def serve(temp_dir: Path, owner_pid: int, head_cpus: float, head_resources: dict[str, float],
          object_store_bytes: int, dashboard: bool = True, log_monitor: bool = True,
          start_timeout_s: float = 240.0) -> None:
    """Build the cluster, publish its state, then serve add/restart requests until told to stop."""
    import ray._private.utils
    from ray.cluster_utils import Cluster

    # Cluster() records its address in /tmp/ray/ray_current_cluster, which `ray.init("auto")`
    # of every other user on this machine would then follow. Not ours to write.
    ray._private.utils.write_ray_address = lambda *args, **kwargs: None
    stopping = False

    def request_stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    dashboard_port = free_port() if dashboard else None
    common = {"object_store_memory": object_store_bytes, "node_ip_address": LOOPBACK}
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, "num_cpus": head_cpus, "resources": head_resources, "temp_dir": str(temp_dir),
        "include_dashboard": dashboard, "dashboard_host": LOOPBACK, "dashboard_port": dashboard_port,
        "include_log_monitor": log_monitor})
    if not dashboard:
        cluster.wait_for_nodes(timeout=start_timeout_s)  # the client waits through the State API, which the dashboard serves
    # Ray's own SIGTERM handler would exit mid-request; stop between requests instead.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    nodes: dict[str, tuple[Any, dict[str, Any]]] = {}

    def add(name: str, num_cpus: float, resources: dict[str, float]) -> dict[str, Any]:
        cpus = int(num_cpus) if float(num_cpus).is_integer() else num_cpus
        node = cluster.add_node(wait=False, **common, num_cpus=cpus, resources=resources)
        info = _node_info(node, name, num_cpus, resources, head=False)
        nodes[name] = (node, info)
        return info

    head = _node_info(cluster.head_node, "head", head_cpus, head_resources, head=True)
    _write_json(temp_dir / STATE_FILE, {"address": cluster.address,
                                        "dashboard_url": f"http://{LOOPBACK}:{dashboard_port}" if dashboard else "",
                                        "node": head})
    control = temp_dir / CONTROL_DIR
    try:
        while not stopping:
            try:
                os.kill(owner_pid, 0)
            except ProcessLookupError:
                break  # the process that started us died without stopping us
            for request in sorted(control.glob("request-*.json")):
                body = json.loads(request.read_text())
                reply = control / request.name.replace("request-", "reply-")
                try:
                    if body["op"] == "add":
                        info = add(body["name"], body["num_cpus"], body["resources"])
                    elif body["op"] == "restart":
                        old, old_info = nodes.pop(body["name"])
                        cluster.remove_node(old, allow_graceful=False)  # reaps what the kill left
                        info = add(body["name"], old_info["num_cpus"], old_info["resources"])
                    else:
                        raise ValueError(f"unknown op {body['op']!r}")
                    _write_json(reply, {"node": info})
                except Exception as error:  # reported to the caller
                    _write_json(reply, {"error": f"{type(error).__name__}: {error}"})
                request.unlink()
            time.sleep(0.2)
    finally:
        for node, _ in nodes.values():
            try:
                cluster.remove_node(node, allow_graceful=False)
            except Exception:  # already dead; keep tearing down
                pass
        cluster.shutdown()


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lmplatform.testing.local_cluster",
                                     description="Host a multi-node Ray cluster on 127.0.0.1 (used by LocalCluster).")
    sub = parser.add_subparsers(dest="command", required=True)
    host = sub.add_parser("serve", help="build the cluster, write its state file, serve node requests")
    host.add_argument("--temp-dir", type=Path, required=True)
    host.add_argument("--owner-pid", type=int, required=True)
    host.add_argument("--head-cpus", type=float, default=1)
    host.add_argument("--head-resources", type=json.loads, default={})
    host.add_argument("--object-store-bytes", type=int, default=DEFAULT_OBJECT_STORE_BYTES)
    host.add_argument("--no-dashboard", dest="dashboard", action="store_false")
    host.add_argument("--no-log-monitor", dest="log_monitor", action="store_false")
    host.add_argument("--start-timeout-s", type=float, default=240.0)
    args = parser.parse_args(argv)
    head_cpus = int(args.head_cpus) if float(args.head_cpus).is_integer() else args.head_cpus
    serve(args.temp_dir, args.owner_pid, head_cpus, args.head_resources, args.object_store_bytes, args.dashboard,
          args.log_monitor, args.start_timeout_s)


if __name__ == "__main__":
    main()
