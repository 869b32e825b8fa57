"""Markdown tables for reports (evaluation tasks, studies, pipelines, the config reference)."""
from __future__ import annotations

from typing import Iterable, Sequence

__all__ = ["markdown_table"]  # what tools may use (lazy_exports.py)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table: the header, a `---` separator per column, then one line per row of cells (no trailing newline)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)
