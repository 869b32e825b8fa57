"""An import of a package module inside a function is there for one reason: moved to the top of its module, it would
load a heavy library that module does not load yet (torch, Ray, MLflow...: configs stay torch-free, Ray-free code
stays Ray-free, and `lmp --help` loads no engine: a command imports what it runs when it runs). Any other belongs at
the top, and one that would close an import cycle means the cycle is to be undone. Exempt: the lines of EXEMPT, each
with its reason.

Read from the source with `ast`, like the layer check: a module loads what its top-level imports load (not those in
functions or under TYPE_CHECKING), transitively.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.source_tree import parse_source
from tests.test_import_layers import PACKAGE, imported_modules

HEAVY = frozenset({"torch", "numpy", "transformers", "sentence_transformers", "ray", "mlflow", "faiss", "onnxruntime", "onnx",
                   "openvino", "nncf", "sklearn", "scipy", "matplotlib", "optuna", "bm25s", "pyarrow", "safetensors",
                   "httpx", "fastapi", "starlette", "typer", "rich", "psutil", "prometheus_client"})
EXEMPT = {
    "serving/ingress.py": "Serve pickles the ingress class by value: the HTTP guard it configures must be the "
                          "module's own, imported in __init__ (see the comment there)",
}


def _module_name(path: Path, package_dir: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    visit(tree.body)
    return found


class ModuleGraph:
    """What each module of a package loads when it is imported: package modules and heavy libraries."""

    def __init__(self, package_dir: Path):
        self.paths = {_module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}
        self.trees = {m: parse_source(p) for m, p in self.paths.items()}
        self.package = package_dir.name
        self.modules: dict[str, set[str]] = {}
        self.heavy: dict[str, set[str]] = {}
        for module, tree in self.trees.items():
            names = [n for node in _top_level_imports(tree) for n in self.targets(node, module)]
            self.modules[module] = {n for n in names if n in self.paths}
            self.heavy[module] = {n.split(".")[0] for n in names if n.split(".")[0] in HEAVY}

    def targets(self, node: ast.stmt, module: str) -> list[str]:
        """The modules an import loads: each name and its parent packages (a `from x import name` may be either)."""
        out = []
        for name in imported_modules(node, module, self.paths[module].name == "__init__.py"):
            parts = name.split(".")
            out += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        return out

    def heavy_loads(self, module: str) -> set[str]:
        """The heavy libraries that importing `module` loads."""
        seen, stack, heavy = set(), [module], set()
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                heavy |= self.heavy[current]
                stack += self.modules[current]
        return heavy


def needless_lazy_imports(package_dir: Path, exempt: dict[str, str]) -> list[str]:
    """file:line of each package import inside a function that could be at the top of its module."""
    graph, problems = ModuleGraph(package_dir), []
    for module, tree in graph.trees.items():
        rel = str(graph.paths[module].relative_to(package_dir))
        if rel in exempt:
            continue
        own_heavy = graph.heavy_loads(module)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                targets = [t for t in graph.targets(node, module) if t in graph.paths and t != graph.package]
                if not targets:
                    continue  # a library outside the package
                if not any(graph.heavy_loads(t) - own_heavy for t in targets):
                    problems.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return problems


def test_imports_inside_functions_load_something_heavy() -> None:
    problems = needless_lazy_imports(PACKAGE, EXEMPT)
    assert not problems, "imports that belong at the top of their module:\n" + "\n".join(problems)


@pytest.mark.parametrize("body, needless", [
    ("def f():\n    from lmplatform.light import X\n", True),  # loads nothing heavy: belongs at the top
    ("def f():\n    from lmplatform.heavy import Y\n", False),  # would load torch into a torch-free module
    ("def f():\n    from lmplatform.circle import Z\n", True),  # circle imports user at its top: undo the cycle
    ("import torch\n\ndef f():\n    from lmplatform.heavy import Y\n", True),  # torch is loaded already
])
def test_checker_tells_a_needless_lazy_import(tmp_path: Path, body: str, needless: bool) -> None:
    package = tmp_path / "lmplatform"
    package.mkdir()
    for name, text in {"__init__.py": "", "light.py": "X = 1\n", "heavy.py": "import torch\nY = 1\n",
                       "circle.py": "from lmplatform.user import f\nZ = 1\n", "user.py": body}.items():
        (package / name).write_text(text)
    assert bool(needless_lazy_imports(package, {})) == needless
