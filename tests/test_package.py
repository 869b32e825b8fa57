import importlib.util
import sys
import sysconfig
from pathlib import Path


def test_lmplatform_does_not_shadow_stdlib_platform() -> None:
    import platform

    import lmplatform  # noqa: F401 - imported for its effect: `platform` must still be the stdlib one after it

    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert Path(platform.__file__).resolve().parent == stdlib
    assert callable(platform.system) and platform.system()
    spec = importlib.util.find_spec("platform")
    assert spec is not None and Path(spec.origin).resolve().parent == stdlib
    assert "lmplatform" in sys.modules and not hasattr(platform, "config")


def test_importing_changes_no_environment_but_the_command_line_sets_offline_defaults() -> None:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    probe = ("import os, lmplatform.tune.tuner, lmplatform.serving.app; print(os.environ.get('HF_HUB_OFFLINE'))")
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.split() == ["None"]
    probe = ("import os; from typer.testing import CliRunner; from lmplatform.cli import app; "
             "CliRunner().invoke(app, ['config', 'schema']); "
             "print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'))")
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.split() == ["1", "0"]


def test_user_setting_wins(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "0"
