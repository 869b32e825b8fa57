"""Ray's helpers yield the CPU to training on an embedded Ray: every thread of every Ray process under
the driver goes to niceness 19, the training workers and other programs stay where they were."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lmplatform.ray_runtime import HELPER_NICENESS, TRAINING_OWNS_NODE, embedded_runtime_env, lower_helper_priority

# A process with a second thread alive, that says when it is up.
SLEEPER = """
import sys, threading, time
threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
open(sys.argv[1], "w").close()
time.sleep(120)
"""


def _start(title: str, ready: Path) -> subprocess.Popen:
    """A process whose command line starts with `title`, as Ray's workers retitle theirs ("ray::<class>")."""
    process = subprocess.Popen([title, "-c", SLEEPER, str(ready)], executable=sys.executable)
    while not ready.exists():
        time.sleep(0.05)
    return process


def _niceness(pid: int) -> set[int]:
    return {os.getpriority(os.PRIO_PROCESS, t.id) for t in psutil.Process(pid).threads()}


def test_ray_helpers_go_behind_training_workers_and_other_programs_do_not(tmp_path: Path) -> None:
    helper = _start("ray::TrainController", tmp_path / "helper")
    worker = _start("ray::RayTrainWorker", tmp_path / "worker")
    other = _start("python", tmp_path / "other")  # its arguments hold "ray" (this test's folder name)
    try:
        assert max(_niceness(helper.pid)) < HELPER_NICENESS
        changed = lower_helper_priority(psutil.Process())
        assert changed == 1
        assert _niceness(helper.pid) == {HELPER_NICENESS}  # both of its threads
        assert max(_niceness(worker.pid)) < HELPER_NICENESS
        assert max(_niceness(other.pid)) < HELPER_NICENESS
        assert os.getpriority(os.PRIO_PROCESS, 0) < HELPER_NICENESS  # the driver itself is never touched
        assert lower_helper_priority(psutil.Process()) == 1  # again: nothing to lower, nothing fails
    finally:
        for process in (helper, worker, other):
            process.kill()
            process.wait()


def test_only_an_embedded_ray_started_for_training_lets_its_workers_do_it() -> None:
    assert embedded_runtime_env(training_owns_node=True)["env_vars"][TRAINING_OWNS_NODE] == "1"
    assert TRAINING_OWNS_NODE not in embedded_runtime_env()["env_vars"]  # the tests' session Ray, a serving Ray
