"""What every ray_jobs/ entry point checks before it imports lmplatform: can this Python run it?

Under `ray job submit` the entrypoint's `python` is the first one on the PATH of the process
that started the Ray head (`ray start`), not the submitter's. A head started with
`.venv/bin/ray start` from a shell without the activated venv runs jobs with the system Python,
which usually has neither torch nor Ray. Shipping the library with the job (`py_modules` in
ray_jobs/runtime_env.yaml) cannot help there, so instead of a bare ModuleNotFoundError the job
says which interpreter ran and exactly what to do.

Standard library only and nothing newer than Python 3.6: this runs before we know what the
interpreter has. Imported by the scripts beside it (their folder is sys.path[0]).
"""
import importlib.util
import os
import platform
import sys

# The dependencies a bare interpreter lacks first (pyproject.toml has the full list); found
# without importing them, so the check costs milliseconds.
DEPENDENCIES = ("ray", "torch", "transformers", "mlflow", "pydantic", "typer", "yaml")
MIN_PYTHON = (3, 10)
# Set by Ray's job supervisor in the entrypoint's environment.
JOB_ENV_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _under_ray_job() -> bool:
    return JOB_ENV_VAR in os.environ


def _interpreter() -> str:
    return "{} (Python {})".format(sys.executable or "python", platform.python_version())


def _fix_interpreter(script: str) -> str:
    """How to get an interpreter that has the dependencies."""
    if _under_ray_job():
        return "\n".join([
            "A `ray job submit` entrypoint's `python` is the first one on the PATH of the process that",
            "started the Ray head (`ray start`), not yours. Do one of:",
            "  1. Name the project's interpreter in the entrypoint (a head on this machine; your shell",
            "     expands $PWD when you submit from the repository root):",
            f'       ray job submit ... --runtime-env ray_jobs/runtime_env.yaml -- "$PWD/.venv/bin/python" {script} ...',
            "  2. Restart the head from a shell with the venv activated (`source .venv/bin/activate`, then",
            "     `ray start --head ...`), so that `python` is the venv's.",
            "  3. Install the project and its dependencies into this Python:",
            "       {} -m pip install <repository>".format(sys.executable or "python"),
            "     (on a cluster, cluster.yaml's setup_commands or the RayJob's image do this on every node).",
        ])
    return "\n".join([
        "Run it with the project's virtual environment (`make install` creates it):",
        f"    .venv/bin/python {script} ...",
        "or activate it first (`source .venv/bin/activate`), or install the project into this Python",
        "(`{} -m pip install -e .` from the repository root).".format(sys.executable or "python"),
    ])


def _fix_library(script: str) -> str:
    """How to make lmplatform importable where its dependencies already are."""
    if _under_ray_job():
        return "\n".join([
            "The job did not bring the library. Submit from the repository root with the project's runtime",
            "env, which ships src/platform/lmplatform with the job (py_modules):",
            "    ray job submit ... --working-dir . --runtime-env ray_jobs/runtime_env.yaml -- \\",
            f'        "$PWD/.venv/bin/python" {script} ...',
            "or install the project on every node (cluster.yaml and deploy/rayjob.yaml do).",
        ])
    return "\n".join([
        "Install the project into this Python (`{} -m pip install -e .` from the repository".format(
            sys.executable or "python"),
        f"root), or run it with the project's virtual environment: .venv/bin/python {script} ...",
    ])


def require_lmplatform() -> None:
    """Exit with instructions unless this interpreter can import lmplatform and its dependencies."""
    script = sys.argv[0] or "ray_jobs/<script>.py"
    if sys.version_info < MIN_PYTHON:
        raise SystemExit(f"{script} cannot run in {_interpreter()}: "
                         f"lmplatform needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer.\n{_fix_interpreter(script)}")
    missing = [name for name in DEPENDENCIES if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit("{} cannot run in {}: it does not have lmplatform's dependencies (missing: {}).\n{}".format(
            script, _interpreter(), ", ".join(missing), _fix_interpreter(script)))
    try:
        import lmplatform
    except ModuleNotFoundError as error:
        if error.name != "lmplatform":
            raise
        raise SystemExit(f"{script} cannot import lmplatform in {_interpreter()}: "
                         f"the dependencies are there, the library is not.\n{_fix_library(script)}") from None
    if _under_ray_job():
        # Which interpreter and which copy of the library a job ran is the first question when
        # one behaves differently from a local run; the job log answers it.
        print(f"[lmp] {script}: {_interpreter()}, "
              f"lmplatform {lmplatform.__version__} from {os.path.dirname(lmplatform.__file__)}", file=sys.stderr)
