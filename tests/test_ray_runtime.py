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
# A driver that starts one SLEEPER per title, each with a command line that starts with the title, as Ray
# retitles its workers ("ray::<class>"). The test's own process has the session Ray's daemons as children,
# so the tree under test gets a driver of its own.
DRIVER = """
import subprocess, sys, time
sleeper, folder, titles = sys.argv[1], sys.argv[2], sys.argv[3:]
for i, title in enumerate(titles):
    subprocess.Popen([title, "-c", sleeper, f"{folder}/{i}"], executable=sys.executable)
time.sleep(120)
"""


def _niceness(pid: int) -> set[int]:
    return {os.getpriority(os.PRIO_PROCESS, t.id) for t in psutil.Process(pid).threads()}


def test_ray_helpers_go_behind_training_workers_and_other_programs_do_not(tmp_path: Path) -> None:
    titles = ["ray::TrainController", "ray::RayTrainWorker", "python"]  # python: its arguments hold "ray" (tmp_path)
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, SLEEPER, str(tmp_path), *titles])
    try:
        while not all((tmp_path / str(i)).exists() for i in range(len(titles))):
            time.sleep(0.05)
        root = psutil.Process(driver.pid)
        by_title = {child.cmdline()[0]: child.pid for child in root.children()}
        helper, worker, other = (by_title[title] for title in titles)
        assert max(_niceness(helper)) < HELPER_NICENESS
        assert lower_helper_priority(root) == 1
        assert _niceness(helper) == {HELPER_NICENESS}  # both of its threads
        assert max(_niceness(worker)) < HELPER_NICENESS
        assert max(_niceness(other)) < HELPER_NICENESS
        assert max(_niceness(driver.pid)) < HELPER_NICENESS  # the driver itself is never touched
        assert lower_helper_priority(root) == 1  # again: nothing left to lower, nothing fails
    finally:
        for child in psutil.Process(driver.pid).children():
            child.kill()
        driver.kill()
        driver.wait()


def test_only_an_embedded_ray_started_for_training_lets_its_workers_do_it() -> None:
    assert embedded_runtime_env(training_owns_node=True)["env_vars"][TRAINING_OWNS_NODE] == "1"
    assert TRAINING_OWNS_NODE not in embedded_runtime_env()["env_vars"]  # the tests' session Ray, a serving Ray
