"""No function of the package runs past 100 lines: a longer one does several things, each of which deserves a name
(jobs/train_run.py's `run_training` is its named steps)."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.source_tree import parse_source

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "platform" / "lmplatform"
MAX_LINES = 100


def long_functions(package_dir: Path, max_lines: int = MAX_LINES) -> list[str]:
    """'file:line name (n lines)' for every function or method longer than `max_lines`, nested ones included."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(parse_source(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > max_lines:
                    found.append(f"{path.relative_to(package_dir)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_100_lines() -> None:
    assert long_functions(PACKAGE) == []


def test_the_check_names_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"        x{n} = {n}\n" for n in range(MAX_LINES))
    (tmp_path / "mod.py").write_text(f"def short():\n    return 1\n\n\nclass A:\n    def long(self):\n{body}")
    assert long_functions(tmp_path) == [f"mod.py:6 long ({MAX_LINES + 1} lines)"]
