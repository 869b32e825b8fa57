"""Starting or joining Ray the same way from every entry point."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional

from lmplatform.runtime import apply_runtime_defaults, worker_env_vars

RAY_DATA_LOGGING = Path(__file__).with_name("ray_data_logging.yaml")


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
    `ray.train`, so RunConfig's logging_config (WARNING, see train/run.py) does not reach it."""
    from ray.train.v2._internal.execution import context

    logging.getLogger(context.__file__).setLevel(logging.WARNING)


def ensure_ray(address: Optional[str] = None, num_cpus: Optional[int] = None) -> None:
    """Join the cluster at `address`/$RAY_ADDRESS, else start an embedded local Ray.

    A job started by `ray job submit` has RAY_ADDRESS set and joins its cluster.
    Without an address we start a fresh local instance (address="local") rather than
    attaching to whatever cluster `ray start` last left on this machine.
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
    # The dashboard (on loopback) backs the State API that Ray Train's own
    # monitors query; without it they log a warning every second.
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
        runtime_env=embedded_runtime_env(),
        # Ray renices its workers to 15, which protects a shared cluster's daemons but, on a
        # machine that runs one job, lets every other process (even Ray's own polling daemons)
        # preempt training: a worker's OpenMP threads then stall at each barrier. An embedded
        # Ray runs its workers like a plain script would.
        _system_config={"worker_niceness": 0},
    )


def embedded_runtime_env() -> dict[str, Any]:
    """The job runtime env of a driver on a Ray this machine owns: our env vars in every worker,
    and workers that resolve "auto" addresses to their own cluster."""
    return {"env_vars": worker_env_vars(), "worker_process_setup_hook": "lmplatform.ray_runtime.pin_ray_address"}


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
