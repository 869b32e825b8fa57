r"""A tracker's export to a registered, indexed and served duplicate finder, as one job (`lmp pipeline tracker`):
import it into runs/data/NAME, run configs/pipelines/tracker_system.yaml on it (registering NAME with its index and
search settings), and serve exactly the version it registered with serve/config.yaml. Everything is validated before
the import starts; one line per step with its wall time, then the URL and a sample POST /v1/duplicates.

    python ray_jobs/tracker_system.py --format jira-json --input export.json --name mytracker [--links links.jsonl] \
        [--map title=fields.summary] [--set stages.biencoder.run.optim.epochs=2] [--no-serve] [--check]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- "$PWD/.venv/bin/python" \
        ray_jobs/tracker_system.py --format jira-json --input "$PWD/export.json" --name mytracker \
        --data-out "$PWD/runs/data/mytracker" --set "storage_path=$PWD/runs/pipelines" \
        --set "tracking.tracking_uri=sqlite:///$PWD/mlruns/mlflow.db" --detach

A job's working directory is a temporary copy: give absolute paths for what should outlive it (above). Inside
`ray job submit`, $RAY_ADDRESS names the cluster that --detach leaves the application on; elsewhere pass --address.
"""
from __future__ import annotations

import sys
from pathlib import Path

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import app

# The recipe and the Serve config, found beside this script: in the repository, or in a job's uploaded working dir
# (lmplatform's own default Serve config is relative to the library's files, which in a job are the py_modules copy).
REPO = Path(__file__).resolve().parents[1]
DEFAULTS = {("--config", "-c"): REPO / "configs" / "pipelines" / "tracker_system.yaml",
            ("--serve-config",): REPO / "serve" / "config.yaml"}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for names, path in DEFAULTS.items():
        if not any(arg in names or arg.startswith(f"{names[0]}=") for arg in args):
            args = [names[0], str(path), *args]
    try:
        app(args=["pipeline", "tracker", *args], prog_name="ray_jobs/tracker_system.py")
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
