"""What bench/ may import from lmplatform: the root's public names (docs/python-api.md) and what a subpackage or
top-level module lists in `__all__` (lazy_exports.py). A deeper module path, or a name a package does not list, is
private: a bench that reaches it fails here, and every listed name resolves."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import lmplatform

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(lmplatform.__file__).parent


def _assigns_all(source: str) -> bool:
    names = [target for node in ast.parse(source).body if isinstance(node, ast.Assign) for target in node.targets]
    names += [element for target in names if isinstance(target, ast.Tuple) for element in target.elts]
    return any(isinstance(target, ast.Name) and target.id == "__all__" for target in names)


def surfaces() -> list[str]:
    """The root and every subpackage or top-level module that lists public names (assigns `__all__`)."""
    found = ["lmplatform"]
    for path in sorted(PACKAGE.iterdir()):
        module = path / "__init__.py" if path.is_dir() else path
        if module.suffix == ".py" and module.is_file() and path.name != "__init__.py" and _assigns_all(module.read_text()):
            found.append(f"lmplatform.{path.stem}")
    return found


def private_imports(source: str, where: str) -> list[str]:
    """The imports of lmplatform in `source` that reach past the public surface, as `where:line: what`."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            problems += [f"{where}:{node.lineno}: import {a.name}" for a in node.names
                         if a.name.startswith("lmplatform.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lmplatform":
            if node.module.count(".") > 1:
                problems.append(f"{where}:{node.lineno}: from {node.module}: a private module path")
                continue
            listed = set(importlib.import_module(node.module).__all__) if node.module in surfaces() else set()
            problems += [f"{where}:{node.lineno}: {node.module} does not list {a.name!r} in __all__"
                         for a in node.names if a.name not in listed]
    return problems


def test_the_benches_import_only_the_public_surface() -> None:
    problems = [p for path in sorted((REPO / "bench").glob("*.py"))
                for p in private_imports(path.read_text(), str(path.relative_to(REPO)))]
    assert not problems, "\n".join(problems)


def test_a_private_path_or_an_unlisted_name_is_caught() -> None:
    source = ("from lmplatform.retrieval.index import VectorIndex\n"
              "from lmplatform.retrieval import VectorIndex, INDEX_FILE\n"
              "from lmplatform.retrieval import COMPACT_AT\n"
              "import lmplatform.serving.control\n")
    assert private_imports(source, "x.py") == [
        "x.py:1: from lmplatform.retrieval.index: a private module path",
        "x.py:3: lmplatform.retrieval does not list 'COMPACT_AT' in __all__",
        "x.py:4: import lmplatform.serving.control"]


@pytest.mark.parametrize("surface", surfaces())
def test_every_listed_name_resolves(surface: str) -> None:
    module = importlib.import_module(surface)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{surface}.{name}"
