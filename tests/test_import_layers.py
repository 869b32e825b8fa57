"""The package's subpackages form a strict order of layers: each imports only from layers below its own, and no
two of its files import each other, directly or round a circle, inside a subpackage too.

Read from the source with `ast` (nothing of lmplatform is imported), so an import inside a function counts like one at
the top of a module. A subpackage is a folder under lmplatform/ or a module at its top (`runtime.py`). Between files,
an import under `if TYPE_CHECKING:` does not count: it never runs, so it closes no circle.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.source_tree import parse_source

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "platform" / "lmplatform"

# Bottom to top. A subpackage may import from any layer below its own; never from its own layer or one above.
LAYERS: list[list[str]] = [
    ["lazy_exports"],  # what a package exports, read on first use: below every package that lists names
    ["__init__", "runtime", "markdown", "result_files", "metrics", "registry"],  # utilities; metrics: pure functions of numbers
    ["ray_runtime"],  # starting or joining Ray
    ["config"],  # the sections of a run config, YAML loading
    ["data"],  # readers, cleaning, pairs, batching plans
    ["models"],  # encoders, heads, export backends, finding a model folder
    ["retrieval"],  # indexes, retrievers, fusion, the document store, retrieval settings
    ["train"],  # the Ray-free engine: loop, recipe, optimizer, state, feed, precision
    ["graph"],  # Ray-free graph pieces: GCN, batches, negatives, kNN, graph metrics
    ["objectives"],  # one folder per objective, the registry, RunConfig
    ["tracking"],  # MLflow runs, the model registry, model cards
    ["evaluation"],  # evaluations of a trained encoder
    ["jobs", "serving"],  # the Ray Train driver and worker, studies that train; Ray Serve
    ["pipeline"],  # multi-stage runs
    ["tune"],  # studies, the champion gate
    ["demo", "testing"],  # the end-to-end demo; helpers for tests
    ["cli", "api"],  # `lmp`; the same as Python functions
]


@dataclass(frozen=True)
class Arrow:
    """One import of subpackage `target` by subpackage `source`, at `where` (file:line, relative to the package)."""

    source: str
    target: str
    where: str


def subpackage_of(module: str, package_dir: Path, names: set[str]) -> str | None:
    """The subpackage a dotted module name lies in (None outside the package; `__init__` for the package's own names)."""
    parts = module.split(".")
    if parts[0] != package_dir.name:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in names else "__init__"


def imported_modules(node: ast.AST, module: str, is_init: bool) -> list[str]:
    """The absolute module names an Import/ImportFrom node names (`from . import x` resolved against `module`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if not node.level:
        base = node.module or ""
        return [f"{base}.{alias.name}" for alias in node.names] if base else []
    # A module's package is its name less the last part; an __init__'s package is its own name.
    package = module.split(".") if is_init else module.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    base = ".".join(anchor + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def import_arrows(package_dir: Path) -> list[Arrow]:
    """Every import from one subpackage of `package_dir` into another, module-level and in functions alike."""
    arrows: dict[Arrow, None] = {}  # ordered, and `from x import a, b` counts once
    names = subpackages(package_dir)
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir)
        module = ".".join((package_dir.name, *rel.with_suffix("").parts))
        is_init = rel.name == "__init__.py"
        if is_init:
            module = module.removesuffix(".__init__")
        source = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.walk(parse_source(path)):
            for name in imported_modules(node, module, is_init):
                target = subpackage_of(name, package_dir, names)
                arrow = Arrow(source, target, f"{rel}:{node.lineno}")
                if target is not None and target != source:
                    arrows[arrow] = None
    return list(arrows)


def module_name(path: Path, package_dir: Path) -> str:
    """The dotted name of a file of the package (`lmplatform.models.encoder`; a package's `__init__` is the package)."""
    rel = path.relative_to(package_dir)
    return ".".join((package_dir.name, *rel.with_suffix("").parts)).removesuffix(".__init__")


def run_time_imports(tree: ast.AST) -> Iterator[ast.stmt]:
    """The import statements of a syntax tree, less those under `if TYPE_CHECKING:` (its `else:` counts)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                yield from run_time_imports(branch)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from run_time_imports(node)


def file_arrows(package_dir: Path) -> list[Arrow]:
    """Every run-time import of one file of the package by another. A name imported from a package (`from pkg import
    x`) points at the module `pkg.x` where there is one, else at the package; a module's own packages, which Python
    imports before it, are left out."""
    paths = sorted(package_dir.rglob("*.py"))
    modules = {module_name(path, package_dir) for path in paths}
    arrows: dict[Arrow, None] = {}
    for path in paths:
        source = module_name(path, package_dir)
        is_init = path.name == "__init__.py"
        for node in run_time_imports(parse_source(path)):
            for name in imported_modules(node, source, is_init):
                parts = name.split(".")
                target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules),
                              None)
                if target is not None and target != source and not source.startswith(target + "."):
                    arrows[Arrow(source, target, f"{path.relative_to(package_dir)}:{node.lineno}")] = None
    return list(arrows)


def layer_index(layers: list[list[str]]) -> dict[str, int]:
    index = {}
    for level, names in enumerate(layers):
        for name in names:
            assert name not in index, f"{name} is named in two layers"
            index[name] = level
    return index


def subpackages(package_dir: Path) -> set[str]:
    folders = {p.name for p in package_dir.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return folders | {p.stem for p in package_dir.glob("*.py")}


def layering_violations(package_dir: Path, layers: list[list[str]]) -> list[str]:
    """One line per subpackage missing from `layers` and per import of the same or a higher layer."""
    index = layer_index(layers)
    problems = [f"{name}: in no layer of LAYERS" for name in sorted(subpackages(package_dir) - index.keys())]
    for arrow in import_arrows(package_dir):
        if arrow.source in index and arrow.target in index and index[arrow.target] >= index[arrow.source]:
            problems.append(
                f"{arrow.where}: {arrow.source} (layer {index[arrow.source]}) imports {arrow.target} "
                f"(layer {index[arrow.target]})"
            )
    return problems


def import_cycles(arrows: list[Arrow]) -> list[list[str]]:
    """The strongly connected components of more than one node, subpackages or files (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for arrow in arrows:
        graph.setdefault(arrow.source, set()).add(arrow.target)
        graph.setdefault(arrow.target, set())
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in order:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], order[succ])
        if low[node] == order[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return components


def test_every_import_points_down_the_layers() -> None:
    problems = layering_violations(PACKAGE, LAYERS)
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_no_cycle_between_subpackages() -> None:
    cycles = import_cycles(import_arrows(PACKAGE))
    assert not cycles, f"subpackages importing each other: {cycles}"


def test_no_cycle_between_files() -> None:
    cycles = import_cycles(file_arrows(PACKAGE))
    assert not cycles, f"files importing each other at run time: {cycles}"


RAY_FREE = ["train", "graph"]  # the engine runs in any process: a Ray Train worker, a test, a bench, a notebook


def ray_imports(package_dir: Path, subpackage: str) -> list[str]:
    """file:line of every import of Ray in a subpackage, those inside functions included."""
    found = []
    for path in sorted((package_dir / subpackage).rglob("*.py")):
        module = module_name(path, package_dir)
        for node in ast.walk(parse_source(path)):
            if any(name.split(".")[0] == "ray" for name in imported_modules(node, module, path.name == "__init__.py")):
                found.append(f"{path.relative_to(package_dir)}:{node.lineno}")
    return found


def test_the_engine_imports_no_ray() -> None:
    found = [where for subpackage in RAY_FREE for where in ray_imports(PACKAGE, subpackage)]
    assert not found, f"Ray imported in a Ray-free subpackage ({', '.join(RAY_FREE)}): {found}"


def test_the_ray_check_finds_an_import_inside_a_function(tmp_path: Path) -> None:
    package = _fake_package(tmp_path, {"train/loop.py": "def report():\n    import ray.train\n"})
    assert ray_imports(package, "train") == ["train/loop.py:2"]


def _fake_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "lmplatform"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {p.parent for p in package.rglob("*.py")} | {package}:
        (folder / "__init__.py").touch()
    return package


FAKE_LAYERS = [["__init__", "runtime"], ["config"], ["train"], ["jobs"]]


def test_checker_accepts_downward_imports(tmp_path: Path) -> None:
    package = _fake_package(
        tmp_path,
        {
            "runtime.py": "X = 1\n",
            "config/schema.py": "from ..runtime import X\n",
            "train/loop.py": "from lmplatform.config.schema import X\nimport lmplatform.runtime\n",
            "jobs/run.py": "def go():\n    from lmplatform.train import loop\n",
        },
    )
    assert layering_violations(package, FAKE_LAYERS) == []
    assert import_cycles(import_arrows(package)) == []


@pytest.mark.parametrize(
    "planted, where",
    [
        ("from lmplatform.jobs.run import go\n", "train/loop.py:1"),  # absolute, module level
        ("def f():\n    from ..jobs import run\n", "train/loop.py:2"),  # relative, inside a function
        ("import lmplatform.jobs.run\n", "train/loop.py:1"),
        ("from lmplatform import jobs\n", "train/loop.py:1"),
    ],
)
def test_checker_names_a_planted_upward_import(tmp_path: Path, planted: str, where: str) -> None:
    package = _fake_package(
        tmp_path,
        {"runtime.py": "", "config/schema.py": "", "train/loop.py": planted, "jobs/run.py": "from ..train import loop\n"},
    )
    problems = layering_violations(package, FAKE_LAYERS)
    assert problems == [f"{where}: train (layer 2) imports jobs (layer 3)"]
    assert import_cycles(import_arrows(package)) == [["jobs", "train"]]


def test_checker_rejects_an_import_within_a_layer_and_an_unplaced_subpackage(tmp_path: Path) -> None:
    package = _fake_package(
        tmp_path,
        {"runtime.py": "", "config/a.py": "", "train/a.py": "", "jobs/a.py": "", "serving/a.py": "from ..jobs import a\n"},
    )
    assert layering_violations(package, FAKE_LAYERS) == ["serving: in no layer of LAYERS"]
    problems = layering_violations(package, [["__init__", "runtime"], ["config"], ["train"], ["jobs", "serving"]])
    assert problems == ["serving/a.py:1: serving (layer 3) imports jobs (layer 3)"]


def test_checker_names_a_circle_of_files_inside_a_subpackage(tmp_path: Path) -> None:
    package = _fake_package(
        tmp_path,
        {
            "models/encoder.py": "from lmplatform.models.graph import G\n",
            "models/graph.py": "def write():\n    from .encoder import E\n",  # closed inside a function: counts
            "models/onnx.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .encoder import E\n",
        },
    )
    assert import_cycles(file_arrows(package)) == [["lmplatform.models.encoder", "lmplatform.models.graph"]]
    (package / "models" / "graph.py").write_text("G = 1\n")
    assert import_cycles(file_arrows(package)) == []
