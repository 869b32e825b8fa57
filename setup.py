"""Package discovery for the `src/platform` -> `lmplatform` mapping.

setuptools' `find` cannot rename packages, so every sub-package of src/platform is
listed here under the `lmplatform.` prefix. All other metadata is in pyproject.toml.
"""
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent / "src" / "platform"

setup(
    packages=["lmplatform"]
    + sorted(
        "lmplatform." + ".".join(init.parent.relative_to(ROOT).parts)
        for init in ROOT.rglob("__init__.py")
        if init.parent != ROOT
    ),
)
