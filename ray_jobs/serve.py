"""Serve the champion with Ray Serve on a cluster (the same as `lmp serve run`).

    python ray_jobs/serve.py --config serve/config.yaml --model models:/lmplatform-biencoder@champion [--set limits.max_k=50]
    ray job submit --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- "$PWD/.venv/bin/python" ray_jobs/serve.py --detach
"""
from __future__ import annotations

import sys
from pathlib import Path

from _preflight import require_lmplatform

require_lmplatform()  # before lmplatform: says what to do when it or its dependencies are missing

from lmplatform.cli import app

# The project's Serve config, found beside this script: in the repository, or in a job's uploaded
# working dir. lmplatform's own default is found relative to the library's files, which in a
# submitted job are the py_modules copy (ray_jobs/runtime_env.yaml), outside the working dir.
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "serve" / "config.yaml"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(arg in ("--config", "-c") or arg.startswith("--config=") for arg in args):
        args = ["--config", str(DEFAULT_CONFIG), *args]
    if "--detach" in args and "--address" not in args:
        args += ["--address", "auto"]  # inside `ray job submit` RAY_ADDRESS names the cluster
    try:
        app(args=["serve", "run", *args], prog_name="ray_jobs/serve.py")
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
