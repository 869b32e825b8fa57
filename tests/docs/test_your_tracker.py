"""docs/your-tracker.md, run: each `lmp data import` line of the page, on a small export of its format written at the
file names the line gives, writes the reports, pairs and summary the page describes; the import output the page shows
is the real one; its pipeline and study lines read the folder its first import writes; its online evaluation config
and its /v1/duplicates request are valid. In-process, no Ray, no model."""
from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import pytest
from typer.testing import CliRunner

from lmplatform.cli import app
from tests.data.trackers.exports import (
    JIRA_CSV_HEADER,
    bugzilla_bug,
    github_issue,
    jira_csv_row,
    jira_issue,
    read_jsonl,
    write_csv,
    write_json,
    write_jsonl,
)
from tests.docs import checks
from tests.docs.checks import REPO, Markdown

PAGE = "docs/your-tracker.md"
TEXT = (REPO / PAGE).read_text(encoding="utf-8")
DOC = Markdown.parse(PAGE, TEXT)
CORE = ("id", "title", "description", "product", "component", "created")

# One tracker's story, told in every format: 15 reports filed over 2020, four duplicate groups (9 duplicates), two
# reports alone, and a link to a report the export does not hold.
# number, filed on (2020, at 10:30 UTC), title, description, master (None: none), component, product (a custom field)
STORY: list[tuple[int, str, str, str, Optional[int], str, str]] = [
    (1, "01-06", "NullPointerException in FileSystem.close", "Closing a FileSystem twice throws an NPE.\n\tat "
     "org.apache.hadoop.fs.FileSystem.close(FileSystem.java:2410)", None, "fs", "Core"),
    (2, "01-20", "FileSystem.close() throws NPE when called twice", "Second close fails with an NPE.", 1, "fs", "Core"),
    (3, "02-03", "Listing an S3 bucket with 10k keys is slow", "listStatus takes minutes.", None, "s3", "Cloud storage"),
    (4, "02-17", "s3a listStatus takes minutes on large prefixes", "", 3, "s3", "Cloud storage"),
    (5, "03-02", "NPE on close after the 3.2.1 upgrade", "FileSystem.close NullPointerException", 1, "fs", "Core"),
    (6, "03-16", "Typo in the core-default.xml docs", "", None, "docs", "Core"),
    (7, "03-30", "Kerberos ticket renewal fails after 24 hours", "GSSException after a day.", None, "security", "Security"),
    (8, "04-13", "Token renewal error: GSSException after one day", "", 7, "security", "Security"),
    (9, "04-27", "S3A directory listing very slow", "Large directories list slowly.", 3, "s3", "Cloud storage"),
    (10, "05-11", "Delegation token expires, jobs fail after a day", "", 7, "security", "Security"),
    (11, "05-25", "Shell command hangs when the process writes to stderr", "", None, "util", "Core"),
    (12, "06-08", "Shell.runCommand never returns on large stderr output", "", 11, "util", "Core"),
    (13, "06-22", "close() on a closed FileSystem: NullPointerException", "", 1, "fs", "Core"),
    (14, "07-06", "ShellCommandExecutor blocks forever", "stderr buffer full", 11, "util", "Core"),
    (15, "07-20", "Old NPE report, reopened", "See the old one.", 99999, "fs", "Core"),
]
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def report_id(fmt: str, number: int) -> str:
    return f"HADOOP-{number}" if fmt.startswith("jira") else f"R{number}" if fmt == "jsonl" else str(number)


def iso(day: str) -> str:
    return f"2020-{day}T10:30:00Z"


def jira_time(day: str) -> str:  # Jira's CSV: dd/MMM/yy h:mm AM
    month, date = day.split("-")
    return f"{date}/{MONTHS[int(month) - 1]}/20 10:30 AM"


def write_export(fmt: str, path: Path) -> None:
    """The story as `fmt` exports it, at `path`; a Bugzilla file named like comments gets the bugs' comments."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jira-json":
        write_json(path, {"issues": [jira_issue(
            report_id(fmt, n), 10_000 + n, f"2020-{day}T10:30:00.000+0000", title, description=text,
            outward=[report_id(fmt, m)] if m else [], inward=["HADOOP-2"] if n == 1 else [],
            extra={"components": [{"name": component}], "customfield_10050": {"id": "1", "value": product}})
            for n, day, title, text, m, component, product in STORY]})
    elif fmt == "jira-csv":
        write_csv(path, JIRA_CSV_HEADER, [
            jira_csv_row(title, report_id(fmt, n), 10_000 + n, jira_time(day), description=text, components=(component,),
                         outward=[report_id(fmt, m)] if m else [])
            for n, day, title, text, m, component, _ in STORY])
    elif fmt == "bugzilla-json" and "comment" in path.name:
        write_json(path, {"bugs": {str(n): {"comments": [{"count": 1, "text": "Confirmed."}, {"count": 0, "text": text}]}
                                   for n, _, _, text, _, _, _ in STORY}})
    elif fmt == "bugzilla-json":
        write_json(path, {"bugs": [bugzilla_bug(n, iso(day), title, dupe_of=m, component=component)
                                   for n, day, title, _, m, component, _ in STORY]})
    elif fmt == "github-json":
        issues = [github_issue(n, iso(day), title, body=text, labels=["duplicate"] if m else ["bug"],
                               comments=[{"body": f"Duplicate of #{m}"}] if m else 0)
                  for n, day, title, text, m, _, _ in STORY]
        write_json(path, issues + [github_issue(16, iso("07-21"), "Fix the NPE in close", pull_request=True)])
    elif fmt == "jsonl":
        epoch_ms = {n: int(_seconds(iso(day)) * 1000) for n, day, *_ in STORY}
        write_jsonl(path, [{"id": report_id(fmt, n), "title": title, "description": text, "product": "Hadoop Common",
                            "component": component, "created": epoch_ms[n], "priority": "Major"}
                           for n, _, title, text, _, component, _ in STORY])
    else:
        raise AssertionError(f"the page imports format {fmt!r}, which this test has no export of")


def write_links(fmt: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, [{"duplicate_id": report_id(fmt, n), "master_id": report_id(fmt, m)}
                       for n, _, _, _, m, _, _ in STORY if m])


def _seconds(text: str) -> float:
    from lmplatform.data.fields import parse_time

    seconds = parse_time(text, "created")
    assert seconds is not None
    return seconds


# ---------------------------------------------------------------- the page's lines

def page_commands() -> list[checks.CommandLine]:
    return [c for c in checks.markdown_commands(DOC) if c.complete]


def import_lines() -> list[checks.CommandLine]:
    return [c for c in page_commands() if checks.command_tokens(c.text)[:2] == ["data", "import"]]


def options(tokens: list[str], *names: str) -> list[str]:
    """Every value of the options `names` in a command's tokens."""
    return [tokens[i + 1] for i, token in enumerate(tokens[:-1]) if token in names]


def one(tokens: list[str], *names: str) -> str:
    values = options(tokens, *names)
    assert len(values) == 1, f"{names} given {len(values)} times in {tokens}"
    return values[0]


def run_import(tokens: list[str], folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Write the exports `tokens` name under `folder` and run the import there, as the page's reader would."""
    fmt = one(tokens, "--format", "-f")
    for name in options(tokens, "--input", "-i"):
        write_export(fmt, folder / name)
    for name in options(tokens, "--links"):
        write_links(fmt, folder / name)
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(app, tokens, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def code_blocks(language: str = "") -> list[str]:
    """The text of each fenced block of the page opened with ```<language>, dedented."""
    blocks: list[str] = []
    lines: Optional[list[str]] = None
    opened = ""
    for line in DOC.lines:
        if checks.FENCE.match(line):
            if lines is None:
                lines, opened = [], line.strip().strip("`~").strip()
            else:
                if opened == language:
                    blocks.append(textwrap.dedent("\n".join(lines)).strip())
                lines = None
            continue
        if lines is not None:
            lines.append(line)
    return blocks


# ---------------------------------------------------------------- tests

def test_the_page_imports_every_format() -> None:
    formats = {one(checks.command_tokens(c.text), "--format", "-f") for c in import_lines()}
    assert formats == {"jira-json", "jira-csv", "bugzilla-json", "github-json", "jsonl"}


@pytest.mark.parametrize("line", import_lines(), ids=lambda c: c.where)
def test_each_import_line_writes_reports_pairs_and_a_summary(line: checks.CommandLine, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = checks.command_tokens(line.text)
    run_import(tokens, tmp_path, monkeypatch)
    out = tmp_path / one(tokens, "--out", "-o")
    reports = read_jsonl(out / "reports.jsonl")
    pairs = read_jsonl(out / "pairs.jsonl")
    summary = json.loads((out / "import_summary.json").read_text(encoding="utf-8"))

    # every story report is read, with the page's schema, its time written as ISO 8601 UTC
    fmt = one(tokens, "--format", "-f")
    by_id = {r["id"]: r for r in reports}
    assert sorted(by_id) == sorted(report_id(fmt, n) for n, *_ in STORY) and len(by_id) == len(reports)
    assert all(set(CORE) <= set(r) for r in reports)
    assert [r["created"] for r in reports] == [iso(day) for _, day, *_ in STORY]
    assert summary["records"]["kept"] == len(reports) and summary["dates"]["created"]["unparsed"] == 0
    assert [(r["title"], r["description"]) for r in reports] == [(title, text) for _, _, title, text, *_ in STORY]
    for field in options(tokens, "--map"):  # every mapped field is found in the export
        name = field.partition("=")[0]
        assert any(r.get(name) not in (None, "") for r in reports), f"--map {field}: no report has a {name}"
    kept = options(tokens, "--metadata")
    if kept:
        mapped = {f.partition("=")[0] for f in options(tokens, "--map")}
        assert {k for r in reports for k in r} - set(CORE) <= set(kept) | mapped

    # the story's groups, each master its earliest report; a pair per other member, in a split
    assert summary["groups"] == {"count": 4, "reports": 13}
    unknown = summary["links"]["unknown"]["link to an unknown report"]["count"]  # to report 99999: in the export, a file
    assert unknown == (fmt != "jsonl") + len(options(tokens, "--links"))
    masters = {report_id(fmt, n) for n, *_ in STORY if any(m == n for *_, m, _, _ in STORY)}
    assert {p["master_id"] for p in pairs} == masters
    assert all(p["group"] == p["master_id"] and by_id[p["master_id"]]["created"] < by_id[p["duplicate_id"]]["created"]
               for p in pairs)
    assert len(pairs) == 9 and summary["pairs"]["total"] == 9
    counts = {s: sum(p["split"] == s for p in pairs) for s in ("train", "dev", "test")}
    assert {s: summary["pairs"][s] for s in counts} == counts
    if (one(tokens, "--split") if "--split" in tokens else "time") == "time":
        rule = summary["split"]
        assert rule["rule"] == "time" and all(counts.values())
        for pair in pairs:
            created = by_id[pair["duplicate_id"]]["created"]
            expected = ("train" if created <= rule["train_until"] else "dev" if created <= rule["dev_until"] else "test")
            assert pair["split"] == expected
    else:
        splits = defaultdict(set)
        for pair in pairs:
            splits[pair["group"]].add(pair["split"])
        assert all(len(s) == 1 for s in splits.values()) and summary["split"]["rule"] == "group"


def test_the_import_output_the_page_shows_is_the_real_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lmplatform.data.fields import parse_time
    from lmplatform.data.readers import DataError

    shown = next(b for b in code_blocks() if b.startswith("read "))
    first = checks.command_tokens(import_lines()[0].text)
    result = run_import(first, tmp_path, monkeypatch)
    assert result.output.replace(f"{tmp_path.resolve()}/", "…/").strip() == shown

    shown = next(line for b in code_blocks() for line in b.splitlines() if line.startswith("dates: created unknown"))
    write_jsonl(tmp_path / "reports.jsonl", [{"id": str(i), "title": "t", "created": 50_000_000_000 + i} for i in (1, 2)])
    result = CliRunner().invoke(app, ["data", "import", "-f", "jsonl", "-i", "reports.jsonl", "-o", "ambiguous"])
    assert shown in result.output.replace(f"{tmp_path.resolve()}/", "…/"), result.output
    with pytest.raises(DataError) as refused:
        parse_time("next week", "created")
    shown = re.search(r"`(created: 'next week' is not a time \(accepted: )\.\.\.\)`", TEXT)
    assert shown and str(refused.value).startswith(shown.group(1))


def test_the_recipe_and_the_study_read_the_folder_the_import_writes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from lmplatform.pipeline.config import load_pipeline_config

    first = checks.command_tokens(import_lines()[0].text)
    run_import(first, tmp_path, monkeypatch)
    root = one(first, "--out", "-o")
    commands = [checks.command_tokens(c.text) for c in checks.markdown_commands(DOC)]
    data_roots = [s.partition("=")[2] for tokens in commands for s in options(tokens, "--set")
                  if s.startswith("vars.data_root=")]
    assert len(data_roots) >= 3 and set(data_roots) == {root}  # pipeline run, validate, tune
    pipeline = next(t for t in commands if t[:2] == ["pipeline", "run"])
    cfg = load_pipeline_config(REPO / one(pipeline, "--config", "-c"), options(pipeline, "--set"))
    pairs = cfg.stages[0].pairs
    assert (pairs.corpus, pairs.relations) == (f"{root}/reports.jsonl", f"{root}/pairs.jsonl")
    assert Path(pairs.corpus).is_file() and Path(pairs.relations).is_file()


def test_the_online_evaluation_config_is_valid_and_reads_the_import(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from lmplatform.evaluation.config import load_evaluation_config

    first = checks.command_tokens(import_lines()[0].text)
    run_import(first, tmp_path, monkeypatch)
    evaluate = next(checks.command_tokens(c.text) for c in page_commands()
                    if checks.command_tokens(c.text)[:2] == ["evaluate", "run"])
    config = tmp_path / one(evaluate, "--config", "-c")
    config.write_text(next(b for b in code_blocks("yaml") if "protocol: online" in b), encoding="utf-8")
    cfg = load_evaluation_config(config, [])
    (task,) = cfg.tasks
    root = one(first, "--out", "-o")
    for dataset in task.datasets:
        assert dataset.protocol == "online" and dataset.window_days == 365
        assert (dataset.corpus, dataset.relations) == (f"{root}/reports.jsonl", f"{root}/pairs.jsonl")
        assert Path(dataset.corpus).is_file()


def test_the_duplicates_request_is_valid_and_speaks_the_imports_metadata(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from lmplatform.data.fields import parse_time
    from lmplatform.retrieval.settings import MetadataFusionConfig
    from lmplatform.serving.schemas import DuplicatesRequest

    block = next(b for b in code_blocks("bash") if "/v1/duplicates" in b)
    words = shlex.split(block[block.index("curl "):])  # the request's JSON spans lines inside its quotes
    assert any(w.endswith("/v1/duplicates") for w in words[:words.index("-d")])
    request = DuplicatesRequest.model_validate_json(words[words.index("-d") + 1])
    metadata = request.report.metadata
    assert set(metadata) == set(MetadataFusionConfig().read_fields()) and parse_time(metadata["created"], "created")
    first = checks.command_tokens(import_lines()[0].text)
    run_import(first, tmp_path, monkeypatch)
    reports = read_jsonl(tmp_path / one(first, "--out", "-o") / "reports.jsonl")
    for field in ("product", "component"):  # the values as the import writes them
        assert metadata[field] in {r[field] for r in reports}
    assert request.report.id not in {r["id"] for r in reports}
