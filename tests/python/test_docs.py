"""The documentation (README.md and docs/*.md) against the code it describes.

- relative links and images point to files that exist, and #fragments to
  headings in them;
- docs/architecture.svg is well-formed SVG, inside its view box;
- docs/options.md's tables list exactly the options and config keys of
  client/kiln/options.py (names, environment variables, defaults);
- every `kilnd --flag` is in `kilnd --help`, every `kiln <command> --flag`
  exists in the CLI;
- every ```sh and ```python block runs and exits 0 (from the repository
  root, venv on PATH, against the session's daemon) unless a line
  `<!-- not run: reason -->` comes right before it. docs/README.md
  describes the convention for writers.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testing.daemons import find_kilnd
from kiln.options import CONFIG_KEYS, OPTIONS, OpList, RuntimeConfig

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SVG = REPO / "docs" / "architecture.svg"
SVG_NS = "{http://www.w3.org/2000/svg}"

RUN_LANGUAGES = {"sh", "python"}
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
BLOCK_TIMEOUT_S = 300


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# ---- reading markdown ----------------------------------------------------------


@dataclasses.dataclass
class Block:
    path: Path
    line: int          # 1-based line of the opening fence
    lang: str
    body: str
    not_run: str | None  # the reason, when marked

    @property
    def id(self) -> str:
        return f"{rel(self.path)}:{self.line}-{self.lang}"


def split_markdown(path: Path) -> tuple[list[Block], str]:
    """The fenced blocks of a file, and its text with them blanked out."""
    lines = path.read_text().split("\n")
    blocks: list[Block] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                      and lines[i].strip().strip(fence[0]) == ""):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1  # the closing fence
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.match(previous)
        blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n",
                            marker.group(1) if marker else None))
        prose.extend([""] * (i - start))
    return blocks, "\n".join(prose)


@functools.cache
def parsed(path: Path) -> tuple[list[Block], str]:
    return split_markdown(path)


INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def inline_code(prose: str) -> list[str]:
    """Code spans (a span may wrap over lines, not over paragraphs)."""
    return [" ".join(m.group(2).split()) for m in INLINE_CODE.finditer(prose)
            if "\n\n" not in m.group(2)]


def code_texts(path: Path) -> list[str]:
    """Inline code spans and the lines of shell blocks: where commands are."""
    blocks, prose = parsed(path)
    texts = inline_code(prose)
    for block in blocks:
        if block.lang in SHELL_LANGUAGES:
            texts.extend(block.body.splitlines())
    return texts


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    _, prose = parsed(path)
    seen: dict[str, int] = {}
    result = set()
    for line in prose.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


# ---- links and images ------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_SRC = re.compile(r"<(?:img|a)\s[^>]*(?:src|href)=\"([^\"]+)\"", re.IGNORECASE)


def links(path: Path) -> list[str]:
    _, prose = parsed(path)
    text = INLINE_CODE.sub("", prose)
    return LINK.findall(text) + HTML_SRC.findall(text)


@pytest.mark.parametrize("path", DOC_FILES, ids=rel)
def test_relative_links_and_images_point_to_existing_files(path):
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: {dest} does not exist")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {rel(dest)}")
    assert broken == [], f"{rel(path)}: " + "; ".join(broken)


def test_docs_index_lists_every_page():
    _, prose = parsed(REPO / "docs" / "README.md")
    listed = {Path(t.partition("#")[0]).name for t in links(REPO / "docs" / "README.md")}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages - listed == set(), f"docs/README.md does not link {sorted(pages - listed)}"


# ---- the architecture picture ------------------------------------------------------


def test_architecture_svg_is_well_formed_and_inside_its_view_box():
    root = ET.parse(SVG).getroot()
    assert root.tag == f"{SVG_NS}svg"
    x0, y0, width, height = map(float, root.get("viewBox").split())
    texts = list(root.iter(f"{SVG_NS}text"))
    assert len(texts) > 20
    outside = []
    for el in [*texts, *root.iter(f"{SVG_NS}rect")]:
        x, y = float(el.get("x", 0)), float(el.get("y", 0))
        right = x + float(el.get("width", 0))
        bottom = y + float(el.get("height", 0))
        if not (x0 <= x <= x0 + width and y0 <= y and right <= x0 + width
                and bottom <= y0 + height):
            outside.append(f"<{el.tag[len(SVG_NS):]} x={x} y={y}>")
    assert outside == [], f"outside the view box {root.get('viewBox')}: {outside}"
    # GitHub shows SVG as an image: nothing external is loaded, nothing runs.
    source = SVG.read_text()
    assert "<script" not in source and "http://" not in source.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


def test_architecture_svg_shows_the_parts_the_page_describes():
    words = " ".join("".join(t.itertext()) for t in ET.parse(SVG).getroot().iter(f"{SVG_NS}text"))
    for part in ("Dynamo", "lowering", "partition", "eager fallback", "/dev/shm", "arena",
                 "call channel", "unix socket", "gRPC", "kilnd", "sessions", "validate",
                 "shape propagation", "passes", "prepacked", "memory plan", "oneTBB",
                 "oneDNN", "constant store", "SHA-256", "graph cache", "cache directory",
                 "artifacts/"):
        assert part in words, f"architecture.svg does not mention {part!r}"


# ---- the options table ---------------------------------------------------------------


def table_after(path: Path, header: str) -> list[list[str]]:
    """Rows (cells) of the markdown table whose header row is `header`."""
    _, prose = parsed(path)
    lines = prose.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == header]
    assert len(starts) == 1, f"{rel(path)}: expected one table headed {header!r}"
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.strip().startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def first_code(cell: str) -> str | None:
    m = INLINE_CODE.search(cell)
    return m.group(2) if m else None


def documented_default(value) -> str:
    """How the table writes a registry default."""
    if isinstance(value, OpList):
        return repr(list(value))
    if isinstance(value, RuntimeConfig):
        return repr({k: v for k, v in dataclasses.asdict(value).items() if v is not None})
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def test_options_table_matches_the_options_registry():
    rows = table_after(REPO / "docs" / "options.md", "| option | env | default | meaning |")
    documented = [(first_code(r[0]), first_code(r[1]) if r[1] not in ("", "—") else None,
                   first_code(r[2])) for r in rows]
    expected = [(s.name, s.env, documented_default(s.default)) for s in OPTIONS]
    missing = [e for e in expected if e[0] not in {d[0] for d in documented}]
    extra = [d for d in documented if d[0] not in {e[0] for e in expected}]
    assert not missing and not extra, (
        f"docs/options.md and client/kiln/options.py differ: add rows for {missing} "
        f"(name, env, default), remove {extra}")
    assert documented == expected, (
        "docs/options.md's table differs from OPTIONS (name, env var, default, in the "
        f"registry's order):\n  docs: {documented}\n  code: {expected}")
    assert all(r[3] for r in rows), "every option needs a meaning"


def test_config_table_matches_the_config_keys():
    rows = table_after(REPO / "docs" / "options.md", "| key | values | default | meaning |")
    assert [first_code(r[0]) for r in rows] == [k.name for k in CONFIG_KEYS]
    for row, key in zip(rows, CONFIG_KEYS):
        if key.choices:
            values = [m.group(2) for m in INLINE_CODE.finditer(row[1])]
            assert values == list(key.choices), f"config {key.name}: {values} vs {key.choices}"
            assert first_code(row[2]) in key.choices, f"config {key.name}: default {row[2]}"
        else:
            assert row[1] == key.valid, f"config {key.name}: {row[1]!r} vs {key.valid!r}"


def test_readme_has_no_copy_of_the_options_table():
    _, prose = parsed(REPO / "README.md")
    assert "| option | env | default | meaning |" not in prose
    assert "| key | values | default | meaning |" not in prose


# ---- kilnd flags and kiln commands --------------------------------------------------

SEPARATORS = {"|", "||", "&&", ";", "&", ")", "("}


@functools.cache
def kilnd_help() -> str:
    out = subprocess.run([find_kilnd(), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def kilnd_flag_uses() -> list[tuple[str, str, str]]:
    """(file, flag, text) for each --flag that follows a `kilnd` command word."""
    uses = []
    for path in DOC_FILES:
        for text in code_texts(path):
            for m in re.finditer(r"(?:^|(?<=[\s/(]))kilnd(?=\s|$)", text):
                rest = re.split(r"[;&|\n]|\s#", text[m.end():])[0]
                uses += [(rel(path), f, text) for f in re.findall(r"--[a-z][a-z0-9-]*", rest)]
    return uses


def test_every_kilnd_flag_in_the_docs_is_in_kilnd_help():
    uses = kilnd_flag_uses()
    assert uses, "no `kilnd --flag` found in the docs: is the scan broken?"
    known = set(re.findall(r"--[a-z][a-z0-9-]*", kilnd_help()))
    unknown = sorted({(f, flag) for f, flag, _ in uses if flag not in known})
    assert unknown == [], f"flags kilnd --help does not list: {unknown}"


def tokens(text: str) -> list[str]:
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:
        return text.split()


def is_placeholder(token: str) -> bool:
    return token.startswith("<") or token.isupper() or not re.match(r"^[a-z]", token)


def command_word(toks: list[str], i: int) -> bool:
    """Whether toks[i] stands where a shell runs a command: first, or after a
    separator, `VAR=value` assignments aside (not `from kiln import ...`)."""
    j = i - 1
    while j >= 0 and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", toks[j]):
        j -= 1
    return j < 0 or toks[j] in SEPARATORS


def kiln_command_uses() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(file, command path, flags) for each `kiln <command> ...` in the docs;
    `ls|stats` is two commands."""
    uses = []
    for path in DOC_FILES:
        for text in code_texts(path):
            toks = [t.strip("[]") for t in tokens(text)]
            for i, tok in enumerate(toks):
                if (tok != "kiln" and not tok.endswith("/kiln")) or not command_word(toks, i):
                    continue
                rest = []
                for t in toks[i + 1:]:
                    if t in SEPARATORS:
                        break
                    rest.append(t)
                commands, flags, path_so_far = [()], [], ()
                j = 0
                while j < len(rest):
                    t = rest[j]
                    if t.startswith("--"):
                        flag = t.split("=")[0]
                        flags.append((path_so_far, flag))
                        if flag in ("--socket", "--cache-dir") and "=" not in t:
                            j += 1  # its value
                    elif len(path_so_far) < 2 and not is_placeholder(t) and (
                            not path_so_far or path_so_far == ("cache",)):
                        alternatives = t.split("|")
                        commands = [path_so_far + (a,) for a in alternatives]
                        path_so_far = commands[0]
                    else:
                        pass  # an argument
                    j += 1
                for command in commands:
                    if command:
                        uses.append((rel(path), command,
                                     tuple(f for where, f in flags
                                           if where == command[:len(where)])))
    return uses


@functools.cache
def kiln_help(command: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kiln.cli", *command, "--help"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def test_every_kiln_command_in_the_docs_exists():
    uses = kiln_command_uses()
    assert any(c == ("status",) for _, c, _ in uses), "the scan found no `kiln status`"
    problems = set()
    for file, command, flags in uses:
        out = kiln_help(command)
        if out.returncode != 0:
            problems.add(f"{file}: kiln {' '.join(command)}: {out.stderr.strip()[-200:]}")
            continue
        text = out.stdout + kiln_help(command[:1]).stdout + kiln_help(()).stdout
        for flag in flags:
            if flag not in text:
                problems.add(f"{file}: kiln {' '.join(command)} has no {flag}")
    assert sorted(problems) == []


# ---- runnable blocks ---------------------------------------------------------------


def runnable_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in parsed(path)[0] if b.lang in RUN_LANGUAGES]


def test_not_run_markers_give_a_reason_and_sit_on_runnable_blocks():
    for path in DOC_FILES:
        blocks, prose = parsed(path)
        for line in prose.splitlines():
            if "not run" in line and line.strip().startswith("<!--"):
                assert NOT_RUN.match(line), f"{rel(path)}: malformed marker {line!r}"
        for b in blocks:
            if b.not_run is not None:
                assert b.lang in RUN_LANGUAGES, f"{b.id}: marker on a block that never runs"


def block_env(kilnd) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KILN_") or k in ("KILN_SOCKET", "KILN_CACHE_DIR", "KILN_DAEMON")}
    venv_bin = str(Path(sys.executable).parent)
    env.update(KILN_SOCKET=kilnd.socket, KILN_CACHE_DIR=kilnd.cache_dir,
               PATH=venv_bin + os.pathsep + env.get("PATH", ""),
               VIRTUAL_ENV=str(Path(venv_bin).parent), PYTHONUNBUFFERED="1")
    return env


@pytest.mark.parametrize("block", [b for b in runnable_blocks() if b.not_run is None],
                         ids=lambda b: b.id)
def test_documented_block_runs(block, kilnd):
    kilnd.ensure_running()
    if block.lang == "sh":
        cmd = ["bash", "-e", "-o", "pipefail", "-c", block.body]
    else:
        cmd = [sys.executable, "-c", block.body]
    try:
        out = subprocess.run(cmd, cwd=REPO, env=block_env(kilnd), capture_output=True,
                             text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.id} ran over {BLOCK_TIMEOUT_S} s; if it starts a service, mark "
                    "it <!-- not run: reason -->")
    assert out.returncode == 0, (
        f"{block.id} exited {out.returncode}\n--- block ---\n{block.body}"
        f"--- stdout ---\n{out.stdout[-3000:]}\n--- stderr ---\n{out.stderr[-3000:]}")
