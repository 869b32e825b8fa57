"""Starting or joining Ray the same way from every entry point."""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from lmplatform.runtime import apply_runtime_defaults, worker_env_vars

__all__ = ["ensure_ray"]  # what tools may use (lazy_exports.py)

if TYPE_CHECKING:
    import psutil

RAY_DATA_LOGGING = Path(__file__).with_name("ray_data_logging.yaml")
TRAINING_OWNS_NODE = "LMP_TRAINING_OWNS_NODE"  # set in the workers of an embedded Ray that serves nothing
HELPER_NICENESS = 19
TRAINING_WORKER = "ray::RayTrainWorker"  # the process title of a Ray Train worker


def quiet_ray_data() -> None:
    """Ray Data's per-operator progress bars flood job logs; our loop prints its own progress.

    Its INFO lines (four per dataset execution) go to its log file only (`ray_data_logging.yaml`):
    set before `ray.data` is imported here, and before an embedded Ray starts, whose workers inherit it.
    A user's own RAY_DATA_LOGGING_CONFIG wins.
    """
    os.environ.setdefault("RAY_DATA_LOGGING_CONFIG", str(RAY_DATA_LOGGING))
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = False


class RayDataConsoleFilter(logging.Filter):
    """Ray Data's console (see ray_data_logging.yaml) without the notice that its progress bars are off:
    `quiet_ray_data` turned them off, and every new dataset coordinator would say so."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Progress bars disabled")


def quiet_train_reports() -> None:
    """In a Ray Train worker: its 'Reporting training result N: TrainingReport(...)' INFO line (hundreds of
    characters, each report) stays in the log file. Ray logs it under the module's file path, not under
    `ray.train`, so RunConfig's logging_config (WARNING, see jobs/train_run.py) does not reach it."""
    from ray.train.v2._internal.execution import context

    logging.getLogger(context.__file__).setLevel(logging.WARNING)


def ensure_ray(address: Optional[str] = None, num_cpus: Optional[int] = None, serving: bool = False) -> None:
    """Join the cluster at `address`/$RAY_ADDRESS, else start an embedded local Ray.

    A job started by `ray job submit` has RAY_ADDRESS set and joins its cluster.
    Without an address we start a fresh local instance (address="local") rather than
    attaching to whatever cluster `ray start` last left on this machine, lean unless it will
    serve (`embedded_system_config`).
    """
    apply_runtime_defaults()  # before Ray is imported: it reads some of these at import time
    import ray

    quiet_ray_data()
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return
    # The dashboard (on loopback) backs the State API that Ray Train's own monitors query; without it
    # they log a warning every second. None starts it where ray[default]'s packages are installed and
    # runs without it on a minimal Ray, where True refuses to start.
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=None,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
        runtime_env=embedded_runtime_env(training_owns_node=not serving),
        _system_config=embedded_system_config(serving),
    )


def embedded_system_config(serving: bool) -> dict[str, Any]:
    """Ray's settings for a local Ray that runs this process's jobs only.

    On a small machine the daemons share the training cores, and each time one of them runs, a step's
    OpenMP threads wait at the next barrier. Measured idle here (2 cores, CPU time of every Ray process
    over 40 s): 0.059 cores with Ray's defaults (20 processes), 0.035 without the prestarted workers and
    the metrics agent's collection (18), 0.020 without the dashboard as well (7); Ray Train's controller
    needs the dashboard's State API, so it stays.
    - worker_niceness 0: Ray renices its workers to 15, which protects a shared cluster's daemons but,
      on a machine that runs one job, lets every other process preempt training.
    - prestart_worker_first_driver off: idle workers started for the first driver, which Ray Train's
      actors do not use.
    - enable_metrics_collection off unless `serving`: Ray's Prometheus export, which nothing reads
      during training; Serve's application metrics (serving/metrics.py) need it.
    """
    config: dict[str, Any] = {"worker_niceness": 0, "prestart_worker_first_driver": False}
    if not serving:
        config["enable_metrics_collection"] = False
    return config


def embedded_runtime_env(training_owns_node: bool = False) -> dict[str, Any]:
    """The job runtime env of a driver on a Ray this machine owns: our env vars in every worker,
    and workers that resolve "auto" addresses to their own cluster. `training_owns_node`: the Ray
    was started for this run alone, so its training workers may put Ray's helpers behind them
    (`HelperPriority`)."""
    env_vars = worker_env_vars() | ({TRAINING_OWNS_NODE: "1"} if training_owns_node else {})
    return {"env_vars": env_vars, "worker_process_setup_hook": "lmplatform.ray_runtime.pin_ray_address"}


def lower_helper_priority(root: psutil.Process) -> int:
    """Set every thread of every Ray process under `root` (the driver that started this Ray) to niceness
    19, except the training workers; returns how many processes were changed. A process that is gone
    or not ours is skipped: raising a niceness needs no privilege, and lowering one is never tried."""
    import psutil
    import ray

    package = str(Path(ray.__file__).parent)
    changed = 0
    for process in root.children(recursive=True):
        try:
            argv = process.cmdline()
            # Ray titles its workers "ray::<class>" and the dashboard's modules "ray-dashboard-<name>";
            # its daemons are programs inside the ray package.
            is_ray = bool(argv) and (argv[0].startswith(("ray::", "ray-dashboard"))
                                     or any(a.startswith(package) for a in argv[:3]))
            if not is_ray or argv[0].startswith(TRAINING_WORKER):
                continue
            for thread in process.threads():
                if os.getpriority(os.PRIO_PROCESS, thread.id) < HELPER_NICENESS:
                    os.setpriority(os.PRIO_PROCESS, thread.id, HELPER_NICENESS)
            changed += 1
        except (psutil.Error, OSError):
            continue
    return changed


class HelperPriority:
    """While a training worker runs on an embedded Ray started for its run alone (`TRAINING_OWNS_NODE`),
    Ray's other processes (GCS, raylet, dashboard, log monitor, Train's controller and Data's actors)
    run at niceness 19, so they take the CPU in the step's gaps instead of preempting its threads.

    On 2 cores about fifteen of them take 12% of one core between them during training, and each
    preemption stalls both of a step's OpenMP threads at the next barrier. Measured with
    bench/openoffice_retrieval.py --speed-only (MiniLM bi-encoder, identical batches): 0.91x the
    sentence-transformers trainer's throughput with them at niceness 0, 0.94x at 19. Helpers start
    during the run (Data's stats actor, read tasks), so the check repeats every `interval_s` seconds
    until `stop()`. A shared cluster (`ray job submit`), a Ray that serves, and the tests' session Ray
    are never touched: only the embedded start sets the flag."""

    def __init__(self, interval_s: float = 10.0):
        self.interval_s = interval_s
        self._stopped = threading.Event()
        if os.environ.get(TRAINING_OWNS_NODE) == "1":
            threading.Thread(target=self._run, name="lmp-helper-priority", daemon=True).start()

    def _run(self) -> None:
        import psutil

        raylet = psutil.Process().parent()
        driver = raylet.parent() if raylet is not None else None
        while driver is not None and not self._stopped.is_set():
            lower_helper_priority(driver)
            self._stopped.wait(self.interval_s)

    def stop(self) -> None:
        self._stopped.set()


def pin_ray_address() -> None:
    """Point a worker's own address lookups at the cluster it belongs to.

    Ray Train's controller actors query the State API with no address, which resolves
    "auto" by scanning the machine for GCS processes; with a second Ray on the same host
    (another user's, a test cluster) that raises "Found multiple active Ray instances"
    in their monitor threads and a later Train run can stall. Runs in every worker of
    an embedded local Ray (`worker_process_setup_hook`).
    """
    import ray

    os.environ.setdefault("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
