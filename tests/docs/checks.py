"""What the docs test checks, as functions of a file's text, so that its own tests can plant errors.

1. `lmp` command lines: every one in README.md, docs/*.md and the comments of configs/ and tune_spaces/ YAML
   parses against the real CLI (click's parser, nothing runs). Fenced code blocks and YAML comment lines that
   start with `lmp` are command lines: unknown commands, unknown options, missing option values, extra
   arguments and missing required options fail. An inline code span (`lmp serve run --verbose`) names a part
   of a command: it must resolve and its options must exist.
2. Repository paths: every path under a top-level folder of the repository (`configs/...`, `bench/...`) in
   code spans, code blocks and relative links exists (a glob matches something), as does every `#anchor` of a
   link into a markdown file. The value of an output option (`--out`, `--results-file`) may not exist yet.
3. Figures: a markdown table followed by a key comment has each figure checked against the JSON field it
   cites, rounded as displayed (0.826 is any value in [0.8255, 0.8265]; 62.5% is 0.625; 1,273 is 1273):

       <!-- figures bench/results/quality.json
       row MiniLM (dense, flat index) :: /retrieval/0/metrics
       col R@1 :: /recall@1
       col R@10 (95% CI) :: /recall@10/value, /recall@10/low, /recall@10/high
       col target :: -
       cell BM25 (bm25s) | R@1 :: bench/results/other.json#/bm25/recall@1
       text "adds 2.3 s per trial" :: /added_s_per_trial
       -->

   A cell's figures are its numbers in reading order (outside code spans); its JSON fields are the row's
   prefix followed by each of the column's comma-separated entries (RFC 6901 pointers, spaces and commas in
   keys allowed; `FILE#/pointer` names another file; an empty column spec is the row's field itself). `cell`
   cites one cell in full. An entry `_` skips a number that is not a figure (a count in a label); a column or
   row `-` is not measured here (a target, a paper's figure). `* 100` or `/ 60` after an entry scales the
   JSON value.
   `text "..."` cites figures in the prose of the same section, before the comment. In docs/benchmarks.md
   every table with a number outside its first column needs a key (or `<!-- figures none: why -->`), every
   cited file is named in its section, with the date of its `machine.date`.
   In the pages that tests/docs/test_docs.py lists in PROSE_CHECKED, every figure of a sentence that looks measured
   (a time in ms, a ratio such as 1.24×, a fraction such as 0.546) lies inside a `text` quote of its section
   (`uncited_prose_figures`); a bound (`≤ 50 ms`) and a code span are not figures.
4. Tracked files hold no absolute machine path and no internal word.
"""
from __future__ import annotations

import glob
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional

try:  # the click the CLI is built with: recent typer releases carry their own copy
    from typer import _click as click
except ImportError:  # pragma: no cover - older typer uses click itself
    import click

REPO = Path(__file__).resolve().parents[2]
# Top-level folders and files of the repository that the docs name by path.
REPO_ROOTS = ("bench", "configs", "data", "deploy", "docs", "ray_jobs", "serve", "src", "tests", "tune_spaces")
REPO_FILES = ("Makefile", "README.md", "cluster.yaml", "pyproject.toml")
OUTPUT_OPTIONS = ("--out", "-o", "--output", "--output-dir", "--results-file", "--workdir")
ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|Users|home/(?!ray/)[\w.-]+)/")
INTERNAL_WORDS = re.compile(r"\bissues? #?\d+|\bthe issue's\b|\bthe lead\b|\blent\b|\bthese machines\b", re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


# ---------------------------------------------------------------- markdown structure

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass
class Markdown:
    """A markdown file split into what the checks read: code lines, prose lines, headings and comments."""
    name: str
    lines: list[str]
    in_code: list[bool] = field(default_factory=list)
    in_comment: list[bool] = field(default_factory=list)

    @classmethod
    def parse(cls, name: str, text: str) -> "Markdown":
        doc = cls(name, text.splitlines())
        code = comment = False
        for line in doc.lines:
            if not comment and FENCE.match(line):
                doc.in_code.append(True)
                doc.in_comment.append(False)
                code = not code
                continue
            starts = not code and "<!--" in line
            doc.in_code.append(code)
            doc.in_comment.append(comment or starts)
            if starts and "-->" not in line.split("<!--", 1)[1]:
                comment = True
            elif comment and "-->" in line:
                comment = False
        return doc

    def prose(self) -> Iterator[tuple[int, str]]:
        """(line number, text) of every line outside code blocks and comments."""
        for i, line in enumerate(self.lines):
            if not self.in_code[i] and not self.in_comment[i]:
                yield i + 1, line

    def anchors(self) -> set[str]:
        """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
        seen: dict[str, int] = {}
        found = set()
        for _, line in self.prose():
            match = HEADING.match(line)
            if not match:
                continue
            slug = re.sub(r"[^\w\- ]", "", match.group(2).replace("`", "").lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        return found


def join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Shell lines with their `\\` continuations joined, each with the number of its first line."""
    joined, current, start = [], "", 0
    for number, line in lines:
        if not current:
            start = number
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip() + " "
            continue
        joined.append((start, current))
        current = ""
    if current:
        joined.append((start, current))
    return joined


# ---------------------------------------------------------------- 1. lmp command lines

COMMAND_START = re.compile(r"^(?:\$\s+)?(?:\S*/)?lmp\s")


@dataclass(frozen=True)
class CommandLine:
    where: str
    text: str
    complete: bool  # a whole command line (code block, YAML comment) rather than a code span in prose


def markdown_commands(doc: Markdown) -> list[CommandLine]:
    found = []
    block: list[tuple[int, str]] = []
    for i, line in enumerate(doc.lines):
        if doc.in_code[i] and not FENCE.match(line):
            block.append((i + 1, line))
            continue
        for number, text in join_continuations(block):
            if COMMAND_START.match(text):
                found.append(CommandLine(f"{doc.name}:{number}", text, complete=True))
        block = []
        if not doc.in_code[i] and not doc.in_comment[i]:
            found += [CommandLine(f"{doc.name}:{i + 1}", span.group(2), complete=False)
                      for span in CODE_SPAN.finditer(line) if COMMAND_START.match(span.group(2) + " ")]
    return found


def yaml_comments(text: str) -> list[tuple[int, str]]:
    """(line number, comment text) of every comment line of a YAML file."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        # A `#` inside a quoted value is not a comment; the shipped configs quote none.
        if hash_at >= 0 and (hash_at == 0 or line[hash_at - 1] in " \t"):
            found.append((number, line[hash_at + 1:]))
    return found


def yaml_commands(name: str, text: str) -> tuple[list[CommandLine], list[Problem]]:
    """A comment line that starts with `lmp` is a command line; `lmp ...` in backticks is a span; any other
    mention of an lmp command in a comment is a problem (it would escape the check)."""
    commands, problems = [], []
    for number, comment in join_continuations(yaml_comments(text)):
        stripped = comment.strip()
        if COMMAND_START.match(stripped + " "):
            commands.append(CommandLine(f"{name}:{number}", stripped.split("  #")[0], complete=True))
            continue
        spans = [span.group(2) for span in CODE_SPAN.finditer(stripped)]
        commands += [CommandLine(f"{name}:{number}", span, complete=False) for span in spans
                     if COMMAND_START.match(span + " ")]
        if re.search(r"(?:^|\s)(?:\S*/)?lmp\s+[a-z]", CODE_SPAN.sub("", stripped)):
            problems.append(Problem(f"{name}:{number}", "an lmp command in a comment must start the comment line "
                                    "or be in backticks, so the docs test parses it"))
    return commands, problems


def command_tokens(text: str) -> list[str]:
    """The words of an `lmp` command line: up to a shell operator or comment, placeholders' brackets dropped."""
    text = re.sub(r"^\$\s+", "", text.strip())
    text = re.sub(r"<[^<>]+>", "PLACEHOLDER", text)  # <pipeline run>, <folder|default>: one word
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if (word and set(word) <= set(";&|")) or re.match(r"^\d?>", word):  # an operator or a redirection
            break
        words.append(word)
    tokens, optional = [], 0
    for word in words[1:]:  # the program itself
        # `[--name lmp]` is an optional part, `...` more of the same: the brackets and dots are not words.
        if word.startswith("[-"):
            optional += 1
            word = word[1:]
        if optional and word.endswith("]") and word.count("[") < word.count("]"):
            optional -= 1
            word = word[:-1]
        if word in ("...", "…") and not (tokens and tokens[-1].startswith("-")):
            continue
        tokens.append(word)
    return tokens


@lru_cache(maxsize=1)
def lmp_command() -> click.Command:
    import typer

    from lmplatform.cli import app

    return typer.main.get_command(app)


def parse_command(tokens: list[str], complete: bool) -> Optional[str]:
    """None if the tokens parse as an `lmp` command line, else click's complaint. Nothing is run. A code span
    (`complete=False`) may leave out required options and values: it names part of a command."""
    # What a span may leave out: a required option, an option's value, a value's placeholder (`--port N`).
    partial = (click.exceptions.MissingParameter, click.exceptions.BadParameter, click.exceptions.BadOptionUsage,
               click.exceptions.NoArgsIsHelpError)
    if "--help" in tokens:  # `lmp export --help` asks for the help of what precedes it
        tokens, complete = [t for t in tokens if t != "--help"], False
    command: click.Command = lmp_command()
    path = ["lmp"]
    args = list(tokens)
    parent: Optional[click.Context] = None
    while True:
        try:
            ctx = command.make_context(path[-1], list(args), parent=parent)
            if not hasattr(command, "resolve_command"):  # a command, not a group
                return None
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                return None if not complete else f"`{' '.join(path)}` needs a command"
            name, command, args = command.resolve_command(ctx, rest)
        except click.ClickException as exc:
            if not complete and isinstance(exc, partial):
                return None
            return f"`{' '.join(path)}`: {exc.format_message()}"
        path.append(name)
        parent = ctx


def check_commands(commands: list[CommandLine]) -> list[Problem]:
    problems = []
    for line in commands:
        error = parse_command(command_tokens(line.text), line.complete)
        if error:
            problems.append(Problem(line.where, f"{line.text!r} does not parse: {error}"))
    return problems


# ---------------------------------------------------------------- 2. repository paths

ROOTS = "|".join(REPO_ROOTS)
FILES = "|".join(re.escape(f) for f in REPO_FILES)
PATH_TOKEN = re.compile(rf"(?<![\w./@:-])((?:{ROOTS})/[\w./*{{}}<>@+-]*|(?:{FILES})(?![\w.]))")


def path_exists(token: str, base: Path) -> bool:
    if any(c in token for c in "<>{}") or "..." in token:  # a placeholder: runs/clner-fold{fold}, <name>, a/...
        return True
    token = token.rstrip(".,:;)")
    last = token.rstrip("/").rsplit("/", 1)[-1]
    if not (token.endswith("/") or re.search(r"\.\w+$", last) or token in REPO_FILES):
        return True  # not a file or folder: an MLflow metric (data/bad_rows/..., data/group_batches_*)
    if "*" in token:
        return bool(glob.glob(str(base / token)))
    return (base / token).exists()


def repository_paths(name: str, text: str, repo: Path, code_only: bool) -> list[Problem]:
    """Every repository path in `text` (its code, or all of it) exists; output option values are exempt."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if code_only:
            pieces = [m.group(2) for m in CODE_SPAN.finditer(line)]
        else:
            pieces = [line]
        for piece in pieces:
            words = piece.split()
            for position, word in enumerate(words):
                if position and words[position - 1] in OUTPUT_OPTIONS:
                    continue
                for match in PATH_TOKEN.finditer(word):
                    if not path_exists(match.group(1), repo):
                        problems.append(Problem(f"{name}:{number}", f"names {match.group(1)!r}, which does not exist"))
    return problems


def markdown_paths(doc: Markdown, repo: Path, anchors: dict[str, set[str]]) -> list[Problem]:
    """Paths in code (blocks and spans) and relative links (their anchors too) of a markdown file."""
    problems = []
    code_lines = ["" if not doc.in_code[i] else line for i, line in enumerate(doc.lines)]
    problems += repository_paths(doc.name, "\n".join(code_lines), repo, code_only=False)
    prose = "\n".join(line if not doc.in_code[i] and not doc.in_comment[i] else "" for i, line in enumerate(doc.lines))
    problems += repository_paths(doc.name, prose, repo, code_only=True)
    folder = (repo / doc.name).parent
    for number, line in doc.prose():
        for link in LINK.finditer(CODE_SPAN.sub("", line)):
            target = link.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            target_path = (folder / file_part).resolve() if file_part else (repo / doc.name).resolve()
            if file_part and not target_path.exists():
                problems.append(Problem(f"{doc.name}:{number}", f"links to {target!r}, which does not exist"))
                continue
            if anchor and target_path.suffix == ".md":
                key = str(target_path.relative_to(repo)) if target_path.is_relative_to(repo) else str(target_path)
                if key not in anchors:
                    anchors[key] = Markdown.parse(key, target_path.read_text(encoding="utf-8")).anchors()
                if anchor not in anchors[key]:
                    problems.append(Problem(f"{doc.name}:{number}", f"links to {target!r}: no heading has that anchor"))
    return problems


# ---------------------------------------------------------------- 3. figures against their JSON fields

NUMBER = re.compile(r"(?<![\w.@=/^-])([+\-−]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(%?)(?![\w@])")
KEY_START = re.compile(r"^\s*<!--\s*figures\b(.*)$")


@dataclass(frozen=True)
class Shown:
    """A number as the docs show it: its value, its decimals, and whether it is a percentage."""
    value: float
    decimals: int
    percent: bool

    def __str__(self) -> str:
        return f"{self.value:.{self.decimals}f}{'%' if self.percent else ''}"

    def matches(self, value: float) -> bool:
        """The figure is `value` rounded as shown (62.5% shows 0.625)."""
        value = value * 100 if self.percent else value
        return abs(value - self.value) <= 0.5 * 10 ** -self.decimals + 1e-9 * max(1.0, abs(value))


def figures(text: str) -> list[Shown]:
    """The numbers of a table cell or a quote, in reading order, code spans left out."""
    found = []
    for match in NUMBER.finditer(CODE_SPAN.sub(" ", text)):
        sign, whole, fraction, percent = match.groups()
        value = float(whole.replace(",", "") + (fraction or ""))
        found.append(Shown(-value if sign in ("-", "−") and sign else value, len(fraction or ".") - 1, bool(percent)))
    return found


@dataclass(frozen=True)
class Entry:
    """One cited JSON field: file, pointer, scale; or a skip (`_`) or a not-measured mark (`-`)."""
    file: Optional[str]
    pointer: str
    scale: float = 1.0
    skip: bool = False


def parse_entry(text: str, default_file: str) -> Entry:
    text = text.strip()
    if text in ("_", "-"):
        return Entry(None, "", skip=True)
    scale = 1.0
    match = re.match(r"^(.*?)\s+([*/])\s+([\d.e+-]+)$", text)
    if match:
        text, op, factor = match.group(1), match.group(2), float(match.group(3))
        scale = factor if op == "*" else 1.0 / factor
    file, _, pointer = text.rpartition("#") if "#" in text else (default_file, "", text)
    return Entry(file or default_file, pointer, scale)


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901: `/a/0/b~1c` is document["a"][0]["b/c"]."""
    if pointer in ("", "/"):
        return document
    node = document
    for part in pointer.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise KeyError(part)
    return node


@dataclass
class Key:
    line: int
    file: str
    rows: dict[str, str] = field(default_factory=dict)
    cols: dict[str, str] = field(default_factory=dict)
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    texts: list[tuple[str, str]] = field(default_factory=list)
    none: bool = False


def parse_key(lines: list[str], start: int) -> tuple[Key, int]:
    """The key comment opening at lines[start]; returns it and the index after its closing line."""
    header = KEY_START.match(lines[start]).group(1).replace("-->", "").strip()
    key = Key(start + 1, header.split()[0] if header and not header.startswith(("none", ":")) else "",
              none=header.startswith(("none", ":")))
    body, i = [], start
    if "-->" not in lines[start]:
        i += 1
        while i < len(lines) and "-->" not in lines[i]:
            body.append(lines[i])
            i += 1
        body.append(lines[i].split("-->")[0])
    for line in body:
        line = line.strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        label, _, entries = rest.rpartition("::")
        if kind == "row":
            key.rows[label.strip()] = entries.strip()
        elif kind == "col":
            key.cols[label.strip()] = entries.strip()
        elif kind == "cell":
            row, _, col = label.partition(" | ")
            key.cells[(row.strip(), col.strip())] = entries.strip()
        elif kind == "text":
            key.texts.append((label.strip().strip('"'), entries.strip()))
        else:
            raise ValueError(f"line {start + 1}: unknown key line {line!r} (row, col, cell or text)")
    return key, i + 1


def table_cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip() for c in cells]


def label(cell: str) -> str:
    """A row or column label as a key names it: without markdown emphasis."""
    return re.sub(r"\*\*|__", "", cell).strip()


@cache
def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


class FigureCheck:
    def __init__(self, name: str, repo: Path, problems: list[Problem]) -> None:
        self.name, self.repo, self.problems = name, repo, problems
        self.cited: list[tuple[int, str]] = []  # (line of the key, file)

    def value(self, where: str, entry: Entry) -> Optional[float]:
        path = self.repo / entry.file
        if not path.exists():
            self.problems.append(Problem(where, f"cites {entry.file}, which does not exist"))
            return None
        try:
            value = resolve_pointer(load_json(path), entry.pointer)
        except (KeyError, IndexError, ValueError):
            self.problems.append(Problem(where, f"cites {entry.file}#{entry.pointer}, which is not in that file"))
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.problems.append(Problem(where, f"cites {entry.file}#{entry.pointer} = {value!r}, not a number"))
            return None
        self.cited.append((0, entry.file))
        return float(value) * entry.scale

    def compare(self, where: str, text: str, entries: list[Entry]) -> None:
        shown = figures(text)
        if len(shown) != len(entries):
            self.problems.append(Problem(where, f"{text!r} shows {len(shown)} figure(s) but cites {len(entries)}"))
            return
        for figure, entry in zip(shown, entries):
            if entry.skip:
                continue
            value = self.value(where, entry)
            if value is not None and not figure.matches(value):
                self.problems.append(Problem(where, f"shows {figure} in {text!r}, but {entry.file}#{entry.pointer} "
                                             f"is {value:g}"))


def check_figures(name: str, text: str, repo: Path, require_keys: bool) -> list[Problem]:
    """Every keyed table's figures and every quoted figure equal their JSON fields; with `require_keys`
    (docs/benchmarks.md) every table with figures has a key and every cited file is named, with its date,
    in the section that cites it."""
    problems: list[Problem] = []
    lines = text.splitlines()
    doc = Markdown.parse(name, text)
    check = FigureCheck(name, repo, problems)
    section_start, i = 0, 0
    table: list[tuple[int, str]] = []

    def split_entries(spec: str, default: str) -> list[Entry]:
        """A spec's entries; an empty spec is the row's own field (`col value ::`)."""
        if not spec.strip():
            return [Entry(default, "")]
        # Entries are comma-separated; a comma inside a JSON key ("ours (lmp train, CoSENT)") is not followed
        # by what starts an entry: a pointer, `_`, `-` or a file.
        return [parse_entry(e, default) for e in re.split(r",\s*(?=[/_-]|[\w./-]+\.json#)", spec)]

    def finish_table(key: Optional[Key]) -> None:
        if not table:
            return
        header = [label(c) for c in table_cells(table[0][1])]
        rows = [(n, table_cells(line)) for n, line in table[2:]]
        has_figures = any(figures(c) for _, cells in rows for c in cells[1:])
        if key is None or key.none:
            if key is None and require_keys and has_figures:
                problems.append(Problem(f"{name}:{table[0][0]}", "a table with figures needs a `<!-- figures` key"))
            return
        unknown = [r for r in key.rows if r not in {label(cells[0]) for _, cells in rows}]
        unknown += [c for c in key.cols if c not in header]
        for missing in unknown:
            problems.append(Problem(f"{name}:{key.line}", f"the key names {missing!r}, which is not a row or column"))
        for number, cells in rows:
            row = label(cells[0])
            for col, cell in zip(header[1:], cells[1:]):
                if not figures(cell):
                    continue
                where = f"{name}:{number}"
                if (row, col) in key.cells:
                    check.compare(where, cell, split_entries(key.cells[(row, col)], key.file))
                    continue
                row_spec, col_spec = key.rows.get(row), key.cols.get(col)
                if row_spec == "-" or col_spec == "-":
                    continue
                if row_spec is None or col_spec is None:
                    problems.append(Problem(where, f"figure(s) in row {row!r}, column {col!r} cite no JSON field"))
                    continue
                prefix = parse_entry(row_spec, key.file) if row_spec.strip("/ ") else Entry(key.file, "")
                entries = [e if e.skip else Entry(prefix.file, prefix.pointer + e.pointer, e.scale)
                           for e in split_entries(col_spec, key.file)]
                check.compare(where, cell, entries)

    def finish_section(end: int) -> None:
        if not require_keys:
            return
        visible = "\n".join(line for j, line in enumerate(lines[section_start:end], section_start)
                            if not doc.in_comment[j])
        for file in sorted({f for _, f in check.cited}):
            if file not in visible:
                problems.append(Problem(f"{name}:{section_start + 1}", f"the section cites {file} without naming it"))
                continue
            date = resolve_machine_date(repo / file)
            if date and date not in visible:
                problems.append(Problem(f"{name}:{section_start + 1}", f"the section names {file} without its date {date}"))
        check.cited.clear()

    while i < len(lines):
        line = lines[i]
        if doc.in_code[i]:
            i += 1
            continue
        if HEADING.match(line) and not doc.in_comment[i]:
            finish_table(None)
            table = []
            finish_section(i)
            section_start = i
        if line.lstrip().startswith("|") and not doc.in_comment[i]:
            table.append((i + 1, line))
            i += 1
            continue
        if KEY_START.match(line):
            try:
                key, after = parse_key(lines, i)
            except ValueError as exc:
                problems.append(Problem(f"{name}:{i + 1}", str(exc)))
                i += 1
                continue
            finish_table(key)
            table = []
            section = "\n".join(lines[section_start:i])
            for quote, spec in key.texts:
                where = f"{name}:{i + 1}"
                if quote not in section:
                    problems.append(Problem(where, f"quotes {quote!r}, which is not in the text before it"))
                    continue
                check.compare(where, quote, split_entries(spec, key.file))
            i = after
            continue
        if line.strip() and table:
            finish_table(None)
            table = []
        i += 1
    finish_table(None)
    finish_section(len(lines))
    return problems


# A measured figure in prose: a time in ms, a ratio (1.24×) or a metric-like fraction (0.546, +0.017).
PROSE_FIGURE = re.compile(r"(?<![\w.,])[+-]?(?:\d[\d,]*(?:\.\d+)?\s?(?:ms\b|×)|0\.\d{2,}\b)")
BOUND = ("≤", "≥", "<", ">", "=")  # what precedes a target or a setting, not a measurement


def uncited_prose_figures(name: str, text: str) -> list[Problem]:
    """Every measured-looking figure in the prose (PROSE_FIGURE; tables, code and comments left out, a bound such
    as `≤ 50 ms` too) lies inside a `text "..."` quote of a figures key of its own section."""
    doc = Markdown.parse(name, text)
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if HEADING.match(line) and not doc.in_code[i] and not doc.in_comment[i]]
    problems = []
    for start, end in zip([0, *starts], [*starts, len(lines)]):  # [start, end) of each section
        quotes = []
        i = start
        while i < end:
            if KEY_START.match(lines[i]) and not doc.in_code[i]:
                key, i = parse_key(lines, i)
                quotes += [quote for quote, _ in key.texts]
                continue
            i += 1
        for j in range(start, end):
            line = lines[j]
            if doc.in_code[j] or doc.in_comment[j] or line.lstrip().startswith("|"):
                continue
            visible = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
            covered = [range(m.start(), m.start() + len(q)) for q in quotes for m in re.finditer(re.escape(q), line)]
            for match in PROSE_FIGURE.finditer(visible):
                if visible[: match.start()].rstrip().endswith(BOUND):
                    continue
                if not any(match.start() in span and match.end() - 1 in span for span in covered):
                    problems.append(Problem(f"{name}:{j + 1}", f"the figure {match.group(0).strip()!r} cites no result "
                                                               f"field (a `text \"...\"` line of a figures key)"))
    return problems


def private_imports(doc: Markdown, public: set[str]) -> list[Problem]:
    """Imports of lmplatform in the page's code that reach past its public surface (`lmplatform.__all__`): a module
    under the package, or a name the package does not export."""
    problems = []
    for i, line in enumerate(doc.lines):
        if not doc.in_code[i]:
            continue
        module = re.match(r"\s*(?:from\s+(lmplatform[\w.]*)\s+import\s+(.+)|import\s+(lmplatform[\w.]*))", line)
        if module is None:
            continue
        path = module.group(1) or module.group(3)
        names = [n.strip().split(" as ")[0] for n in (module.group(2) or "").strip("() ").split(",") if n.strip()]
        if path != "lmplatform":
            problems.append(Problem(f"{doc.name}:{i + 1}", f"imports {path}, a module past the public surface: import "
                                    "its names from lmplatform (docs/python-api.md)"))
        problems += [Problem(f"{doc.name}:{i + 1}", f"lmplatform has no public name {n!r} (lmplatform.__all__)")
                     for n in names if n not in public]
    return problems


def resolve_machine_date(path: Path) -> Optional[str]:
    """The YYYY-MM-DD of a result file's machine.date, where it has one."""
    try:
        date = load_json(path).get("machine", {}).get("date")
    except (OSError, ValueError, AttributeError):
        return None
    return str(date)[:10] if date else None


# ---------------------------------------------------------------- 4. tracked files

def tracked_text_problems(name: str, text: str) -> list[Problem]:
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in ABSOLUTE_PATH.finditer(line):
            problems.append(Problem(f"{name}:{number}", f"absolute machine path {line[match.start():match.end() + 20]!r}"))
        for match in INTERNAL_WORDS.finditer(line):
            problems.append(Problem(f"{name}:{number}", f"internal word {match.group(0)!r}"))
    return problems


def documented_files(repo: Path) -> list[Path]:
    """The files whose commands, paths and figures the docs test reads."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md")),
            *sorted((repo / "configs").rglob("*.yaml")), *sorted((repo / "tune_spaces").glob("*.yaml"))]

