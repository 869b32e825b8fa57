"""The package's own source files as syntax trees, for the tests that check its structure."""
from __future__ import annotations

import ast
from pathlib import Path


def parse_source(path: Path) -> ast.Module:
    """`ast.parse` of a file, tried again where CPython 3.11 before 3.11.8 raises "AST constructor recursion depth
    mismatch": its parser's recursion counter is shared by every thread (gh-106905), so a background thread of the
    suite's process that parses at the same moment upsets it (seen once in a full suite); the source is not at fault."""
    source = path.read_text()
    for _ in range(2):
        try:
            return ast.parse(source, filename=str(path))
        except SystemError as error:
            if "recursion depth mismatch" not in str(error):
                raise
    return ast.parse(source, filename=str(path))
