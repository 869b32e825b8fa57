"""Public names read from their modules on first use (PEP 562), so importing a package loads none of them.

A package (the root, or one of its subpackages) lists what it exports, name -> the module defining it, and takes its
`__all__`, `__getattr__` and `__dir__` from `lazy_exports`. The root's names are the user's API
(docs/python-api.md); a subpackage's are the names tools such as the benches may use (tests/test_public_surface.py
holds bench/ to them); every other module path is private and may change between releases.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_exports(package: str, public: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """(`__all__`, `__getattr__`, `__dir__`) of `package`, whose public names are the keys of `public`: name -> the
    module that defines it under that name, `module:attribute` for one it defines under another, or, for a submodule,
    `<package>.<name>` itself."""
    names = sorted(public)

    def __getattr__(name: str) -> Any:
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        path, _, attribute = public[name].partition(":")
        module = importlib.import_module(path)
        value = module if path == f"{package}.{name}" else getattr(module, attribute or name)
        setattr(sys.modules[package], name, value)  # read once
        return value

    def __dir__() -> list[str]:
        return list(names)

    return names, __getattr__, __dir__
