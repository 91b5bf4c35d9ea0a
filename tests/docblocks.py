"""The code blocks of the docs site (docs/**/*.md) and the README, as the docs tests read them.

A ```python block runs in the tests unless the line before its fence is ``<!-- fragment -->``
(a piece of a larger program that cannot run alone: a settings file, a receiver's handler).
Blocks of one page share a namespace and run in order, as a reader would paste them.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
FRAGMENT = "<!-- fragment -->"
TESTED_BY = re.compile(r"<!-- tested by (tests/\S+\.py) -->")  # a whole project a dedicated test runs
FENCE = re.compile(r"^[ \t]*```(\w*)[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)  # indented in a list too
SHELL = {"sh", "bash", "console", "shell", "yaml"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    source: str
    fragment: bool
    tested_by: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    return [*sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts and "tools" not in p.parts), README]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start()) + 1
        tested_by = TESTED_BY.fullmatch(before)
        source = textwrap.dedent(match.group(2))
        found.append(Block(path, line, match.group(1), source, before == FRAGMENT, tested_by and tested_by.group(1)))
    return found


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.language == "python"]


def cli_lines(block: Block) -> list[list[str]]:
    """Each `workhorse ...` command of a shell block, as argv after the program name.

    A trailing comment is dropped, a `$ ` prompt too, and a line ending in a backslash joins the
    next. YAML blocks (a CI pipeline) are read for `- run: workhorse ...` lines.
    """
    commands = []
    joined = block.source.replace("\\\n", " ")
    for raw in joined.splitlines():
        line = raw.strip().removeprefix("$ ").removeprefix("- run: ")
        if not line.startswith("workhorse "):
            continue
        words = shlex.split(line, comments=True)
        commands.append(words[1:])
    return commands
