import importlib.util
import sys
import sysconfig
from pathlib import Path


def test_lmplatform_does_not_shadow_stdlib_platform() -> None:
    import lmplatform  # noqa: F401
    import platform

    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert Path(platform.__file__).resolve().parent == stdlib
    assert callable(platform.system) and platform.system()
    spec = importlib.util.find_spec("platform")
    assert spec is not None and Path(spec.origin).resolve().parent == stdlib
    assert "lmplatform" in sys.modules and not hasattr(platform, "config")


def test_importing_sets_offline_defaults(monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"


def test_user_setting_wins(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "0"
