"""Shared helpers for benchmarks: environment, result files, ratio reporting."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

RESULTS = Path(__file__).parent / "results"
REPOSITORY = Path(__file__).resolve().parents[1]
# Every bench's --data default: the public data sets beside the repository (../shared/data).
SHARED_DATA = REPOSITORY.parent / "shared" / "data"


def machine() -> dict[str, Any]:
    import torch

    from lmplatform.models import cpu_features

    return {
        "cpus": os.cpu_count(),
        "cpu_features": sorted(cpu_features()),  # what a speed figure's host class is read from
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def portable(value: Any) -> Any:
    """`value` with this machine's paths made relative to the repository (`../shared/...` for the data beside it)."""
    from lmplatform.result_files import portable as relative_to

    return relative_to(value, REPOSITORY)


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(portable({"machine": machine(), **payload}), indent=2))
    print(f"wrote {path}")
    return path


def check(name: str, value: float, target: float, higher_is_better: bool = True) -> dict[str, Any]:
    ok = value >= target if higher_is_better else value <= target
    print(f"{'PASS' if ok else 'MISS'} {name}: {value:.3f} (target {'>=' if higher_is_better else '<='} {target})")
    return {"value": round(value, 4), "target": target, "met": ok}


def training_steps_seconds(tracking_uri: str, run_id: str, batch_size: int) -> tuple[int, float]:
    """(steps, seconds) of a run's training steps alone, from our loop's throughput windows in MLflow: each
    window's samples/s covers the steps since the previous window (no start-up, no validation)."""
    from mlflow.tracking import MlflowClient

    windows = sorted(MlflowClient(tracking_uri).get_metric_history(run_id, "samples_per_s"), key=lambda m: m.step)
    seconds = sum((window.step - before) * batch_size / window.value
                  for before, window in zip([0] + [m.step for m in windows], windows))
    return windows[-1].step, seconds


@contextmanager
def lmp_serve(model_uri: str, tracking_uri: str, index: Path, port: int, settings: Sequence[str] = (),
              ingress: str = "proxy", wait_s: float = 900) -> Iterator[str]:
    """`lmp serve run` (its own embedded Ray) with a registered version over `index`, `--set` `settings` and
    `--ingress` (proxy or haproxy: both answer on `port`): yields the service's URL once /healthz is ok (the models
    loaded; `serving`'s `wait_s`), and stops it (SIGINT: it shuts the application and its Ray down)."""
    command = ["serve", "run", "--model", model_uri, "--index", str(index), "--tracking-uri", tracking_uri,
               "--port", str(port), "--ingress", ingress]
    for setting in settings:
        command += ["--set", setting]
    with serving(command, port, wait_s) as url:
        yield url


@contextmanager
def serving(lmp_args: Sequence[str], port: int, wait_s: float = 900) -> Iterator[str]:
    """`lmp <lmp_args>`, a command that ends up serving on `port` until stopped: yields the service's URL once it
    answers /healthz, and stops it (SIGINT: it shuts the application and its Ray down). wait_s: how long the
    command may take to start serving, a safety net against one that never does."""
    import httpx

    server = subprocess.Popen([sys.executable, "-m", "lmplatform.cli", *lmp_args], cwd=REPOSITORY,
                              start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPOSITORY / "src" / "platform")})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if server.poll() is not None:
                raise SystemExit(f"lmp {' '.join(lmp_args[:2])} exited with {server.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"lmp {' '.join(lmp_args[:2])} was not serving on port {port} after {wait_s:.0f} s")
            try:
                health = httpx.get(f"{url}/healthz", timeout=2)
                if health.status_code == 200 and health.json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass  # the proxy is not listening yet (until the app deploys it answers 404 in plain text)
            time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, 2)
        server.wait(timeout=120)
