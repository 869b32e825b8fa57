"""The docs say what the checkout does: commands parse, paths exist, figures equal their result files, and no
tracked file carries a machine path or an internal word. How each check reads the files: tests/docs/checks.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.docs import checks
from tests.docs.checks import REPO, Markdown

# This folder states the words and paths the last check looks for.
SELF = "tests/docs/"
BINARY = (".png", ".faiss", ".parquet", ".gz", ".onnx", ".bin", ".safetensors", ".pt")


def documented() -> list[Path]:
    return checks.documented_files(REPO)


def name(path: Path) -> str:
    return str(path.relative_to(REPO))


def tracked_files() -> list[str]:
    """The repository's files: git's list where there is one, else every file outside ignored run folders."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        return [f for f in listed.decode().split("\0") if f and (REPO / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".venv", ".git", "mlruns", "runs", "outputs", "__pycache__", ".pytest_cache"}
        return [name(p) for p in REPO.rglob("*") if p.is_file() and not skip & set(p.relative_to(REPO).parts)]


def report(problems: list[checks.Problem]) -> str:
    return "\n".join(map(str, problems))


def test_every_lmp_command_line_parses() -> None:
    commands, problems = [], []
    for path in documented():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".md":
            commands += checks.markdown_commands(Markdown.parse(name(path), text))
        else:
            found, bare = checks.yaml_commands(name(path), text)
            commands += found
            problems += bare
    assert len(commands) > 50, "the docs test found few lmp command lines: is it still reading the docs?"
    problems += checks.check_commands(commands)
    assert not problems, report(problems)


def test_every_repository_path_named_exists() -> None:
    problems: list[checks.Problem] = []
    anchors: dict[str, set[str]] = {}
    for path in documented():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".md":
            problems += checks.markdown_paths(Markdown.parse(name(path), text), REPO, anchors)
        else:
            comments = "\n".join(comment for _, comment in checks.yaml_comments(text))
            problems += checks.repository_paths(name(path), comments, REPO, code_only=False)
    assert not problems, report(problems)


def test_every_figure_equals_its_cited_result_field() -> None:
    problems: list[checks.Problem] = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        problems += checks.check_figures(name(path), path.read_text(encoding="utf-8"), REPO,
                                         require_keys=path.name == "benchmarks.md")
    assert not problems, report(problems)


PROSE_CHECKED = ["docs/serving.md", "docs/evaluation_retrieval.md", "docs/tuning.md"]


@pytest.mark.parametrize("page", PROSE_CHECKED)
def test_measured_figures_in_prose_cite_their_result_fields(page: str) -> None:
    """In these pages a measurement in a sentence is checked as a table's is (what it shows: tests/docs/checks.py)."""
    problems = checks.uncited_prose_figures(page, (REPO / page).read_text(encoding="utf-8"))
    assert not problems, report(problems)


def test_benchmarks_page_cites_its_figures() -> None:
    """The page exists and most of its figures are checked (a key that stopped matching would check nothing)."""
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert text.count("<!-- figures bench/results/") >= 20


def test_no_tracked_file_holds_a_machine_path_or_an_internal_word() -> None:
    problems: list[checks.Problem] = []
    for file in tracked_files():
        if file.startswith(SELF) or file.endswith(BINARY):
            continue
        try:
            text = (REPO / file).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        problems += checks.tracked_text_problems(file, text)
    assert not problems, report(problems)


def test_code_in_the_docs_uses_only_the_public_surface() -> None:
    import lmplatform

    problems = [p for path in documented() if path.suffix == ".md"
                for p in checks.private_imports(Markdown.parse(name(path), path.read_text()), set(lmplatform.__all__))]
    assert not problems, report(problems)


@pytest.mark.parametrize("path", ["README.md", "docs/benchmarks.md"])
def test_readme_and_benchmarks_exist(path: str) -> None:
    assert (REPO / path).is_file()
