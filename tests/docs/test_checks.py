"""The docs test can fail: a planted broken path, unknown flag, wrong figure, machine path or internal word is
reported, on copies of the real README and benchmarks page as well as on small cases."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docs import checks
from tests.docs.checks import REPO, Markdown

README = (REPO / "README.md").read_text(encoding="utf-8")
BENCHMARKS = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
TRAIN_LINE = ".venv/bin/lmp train --config configs/biencoder.yaml --set optim.max_steps=20"


def readme_command_problems(text: str) -> list[checks.Problem]:
    return checks.check_commands(checks.markdown_commands(Markdown.parse("README.md", text)))


def readme_path_problems(text: str) -> list[checks.Problem]:
    return checks.markdown_paths(Markdown.parse("README.md", text), REPO, {})


def test_the_real_readme_passes_the_checks() -> None:
    assert TRAIN_LINE in README
    assert readme_command_problems(README) == [] and readme_path_problems(README) == []


def test_a_planted_unknown_flag_fails() -> None:
    problems = readme_command_problems(README.replace(TRAIN_LINE, TRAIN_LINE + " --max-stepz 20"))
    assert len(problems) == 1 and "No such option: --max-stepz" in problems[0].what


@pytest.mark.parametrize("line, complaint", [
    ("lmp tune run --space tune_spaces/mlm_lr.yaml", "unexpected extra argument"),  # the old header's `tune run`
    ("lmp serve start --model default", "No such command 'start'"),
    ("lmp train --set optim.lr=1e-4", "Missing option '--config'"),
    ("lmp train --config", "requires an argument"),
])
def test_command_lines_that_do_not_parse(line: str, complaint: str) -> None:
    problems = checks.check_commands([checks.CommandLine("x.md:1", line, complete=True)])
    assert len(problems) == 1 and complaint in problems[0].what, problems


@pytest.mark.parametrize("line", [
    "lmp serve reload [--name lmp] [--address ADDR]",              # optional parts in brackets
    "lmp demo --resume <pipeline run>",                           # a placeholder with a space
    "lmp behavioural run SUITE.yaml --encoder <folder|default>",  # a placeholder with a pipe
    "lmp data span-report --config configs/declutr.yaml --max-span 4 8 16 64",  # extra args the command takes
    "lmp config schema > schema.json",                            # a redirection ends the command
    "lmp export --help",                                          # help needs no required option
])
def test_documentation_conventions_parse(line: str) -> None:
    assert checks.check_commands([checks.CommandLine("x.md:1", line, complete=True)]) == []


def test_a_code_span_names_part_of_a_command_but_its_options_must_exist() -> None:
    spans = [checks.CommandLine("x.md:1", "lmp serve run --verbose", complete=False),
             checks.CommandLine("x.md:2", "lmp export --model models:/x/1", complete=False),  # required options omitted
             checks.CommandLine("x.md:3", "lmp serve run --verbos", complete=False)]
    problems = checks.check_commands(spans)
    assert [p.where for p in problems] == ["x.md:3"]


def test_a_planted_broken_path_fails() -> None:
    planted = README.replace("configs/biencoder.yaml --set optim.max_steps=20",
                             "configs/biencoderr.yaml --set optim.max_steps=20")
    problems = readme_path_problems(planted)
    assert len(problems) == 1 and "configs/biencoderr.yaml" in problems[0].what


def test_a_broken_link_or_anchor_fails_and_outputs_and_metric_names_do_not() -> None:
    text = ("See [serving](docs/servng.md) and [tuning](docs/tuning.md#no-such-heading).\n"
            "`lmp export --model default --format onnx --out runs/new/folder` writes `data/bad_rows/...` metrics.\n")
    problems = readme_path_problems(text)
    assert [p.what.split(",")[0] for p in problems] == [
        "links to 'docs/servng.md'", "links to 'docs/tuning.md#no-such-heading': no heading has that anchor"]


def test_yaml_comments_are_read_and_a_bare_mention_is_refused() -> None:
    text = "# Run it:\n#   lmp tune run --space tune_spaces/mlm_lr.yaml\n# then lmp serve run on it\nkey: 1\n"
    commands, bare = checks.yaml_commands("configs/x.yaml", text)
    assert [c.where for c in commands] == ["configs/x.yaml:2"] and [p.where for p in bare] == ["configs/x.yaml:3"]
    assert checks.check_commands(commands)[0].where == "configs/x.yaml:2"
    assert checks.repository_paths("configs/x.yaml", "# reads data/general/paraphrase_dev.jsonl\n", REPO, code_only=False)


def test_the_real_benchmarks_page_passes_and_checks_hundreds_of_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    cited = []
    original = checks.FigureCheck.value
    monkeypatch.setattr(checks.FigureCheck, "value",
                        lambda self, where, entry: cited.append(entry) or original(self, where, entry))
    assert checks.check_figures("docs/benchmarks.md", BENCHMARKS, REPO, require_keys=True) == []
    assert len(cited) > 500


def test_a_planted_wrong_figure_fails() -> None:
    row = "| BM25 (bm25s) | 0.310 | 0.490 |"
    assert row in BENCHMARKS
    problems = checks.check_figures("docs/benchmarks.md", BENCHMARKS.replace(row, "| BM25 (bm25s) | 0.311 | 0.490 |"), REPO, True)
    assert len(problems) == 1 and "shows 0.311" in problems[0].what and "recall@1 is 0.309648" in problems[0].what


def test_a_table_without_a_key_a_missing_field_and_an_unnamed_source_fail(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"machine": {"date": "2026-11-20 10:00"}, "a": {"x": 0.5, "n": 1273.4},
                                                 "share": 0.625}))
    good = ("## S\n\nSource: r.json, 2026-11-20.\n\n| row | x | n |\n|---|---|---|\n| a | 0.50 | 1,273 |\n\n"
            "<!-- figures r.json\nrow a :: /a\ncol x :: /x\ncol n :: /n\n-->\n\nShare: 62.5% of it.\n\n"
            "<!-- figures r.json\ntext \"62.5%\" :: /share\n-->\n")
    assert checks.check_figures("b.md", good, tmp_path, require_keys=True) == []
    no_key = good.split("<!-- figures")[0]
    assert "needs a `<!-- figures` key" in checks.check_figures("b.md", no_key, tmp_path, True)[0].what
    missing = good.replace("col n :: /n", "col n :: /count")
    assert "which is not in that file" in checks.check_figures("b.md", missing, tmp_path, True)[0].what
    unnamed = good.replace("Source: r.json, 2026-11-20.", "Source: a file.")
    assert "without naming it" in checks.check_figures("b.md", unnamed, tmp_path, True)[0].what
    undated = good.replace("2026-11-20", "20 Nov")
    assert "without its date 2026-11-20" in checks.check_figures("b.md", undated, tmp_path, True)[0].what
    uncited = good.replace("col n :: /n\n", "")
    assert "cite no JSON field" in checks.check_figures("b.md", uncited, tmp_path, True)[0].what


PROSE = ("## Serving\n\nA search takes 26.2 ms at p50, 1.24× its in-process time; MRR@10 0.546.\n\n"
         "<!-- figures r.json\ntext \"takes 26.2 ms at p50, 1.24×\" :: /a, /b\ntext \"MRR@10 0.546\" :: /c\n-->\n\n"
         "The target is p50 ≤ 50 ms; the log shows `POST /v1/search 200 12.0ms`.\n\n| t | 3.1 ms |\n")


def test_a_measured_figure_in_prose_needs_a_quote_of_its_own_section() -> None:
    assert checks.uncited_prose_figures("s.md", PROSE) == []  # quoted, a bound, a code span, a table
    unquoted = PROSE.replace('text "MRR@10 0.546" :: /c\n', "")
    assert [p.what.split(" cites")[0] for p in checks.uncited_prose_figures("s.md", unquoted)] == ["the figure '0.546'"]
    half = PROSE.replace('"takes 26.2 ms at p50, 1.24×"', '"takes 26.2 ms"')  # the ratio left outside any quote
    assert [p.what.split(" cites")[0] for p in checks.uncited_prose_figures("s.md", half)] == ["the figure '1.24×'"]
    elsewhere = PROSE.replace("<!-- figures", "## Another section\n\n<!-- figures")  # the key in the next section
    assert len(checks.uncited_prose_figures("s.md", elsewhere)) == 3


@pytest.mark.parametrize("shown, value, same", [
    ("0.826", 0.8257, True), ("0.826", 0.8243, False), ("62.5%", 0.625, True), ("1,273", 1273.4, True),
    ("−0.019", -0.0191, True), ("+0.019", -0.0191, False), ("2.58×", 2.576, True),
])
def test_a_figure_equals_its_field_as_rounded_for_display(shown: str, value: float, same: bool) -> None:
    [figure] = checks.figures(shown)
    assert figure.matches(value) is same


@pytest.mark.parametrize("line, found", [
    ("tracking_uri: sqlite:////work/main/mlruns/mlflow.db", True),
    ("see /home/me/lmplatform for it", True),
    ("/root/.cache/x", True),
    ("the Ray image's /home/ray/lmplatform/configs", False),
    ("runs/work/item and /tmp/ray/session_latest", False),
    ("as issue 18 asks", True),
    ("left to the lead", True),
    ("on a lent H200", True),
    ("on these machines", True),
    ("Known issue: old writer dies", False),
])
def test_machine_paths_and_internal_words_are_found(line: str, found: bool) -> None:
    assert bool(checks.tracked_text_problems("f.md", line)) is found


def test_a_private_import_in_a_page_s_code_is_found() -> None:
    page = Markdown.parse("page.md", "\n".join([
        "from lmplatform.models.encoder import Encoder",  # prose: not code
        "```python",
        "from lmplatform import Encoder, Hidden",
        "import lmplatform.retrieval.index",
        "from lmplatform import (Encoder as E)",
        "```",
    ]))
    found = [str(p) for p in checks.private_imports(page, {"Encoder"})]
    assert found == ["page.md:3: lmplatform has no public name 'Hidden' (lmplatform.__all__)",
                     "page.md:4: imports lmplatform.retrieval.index, a module past the public surface: import its names "
                     "from lmplatform (docs/python-api.md)"]
