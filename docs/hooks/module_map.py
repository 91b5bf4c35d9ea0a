"""MkDocs hook: the module map of how-it-works/architecture.md, read from the source at build
time (each module of src/workhorse and the first sentence of its docstring), so the map follows
the code as modules move, split or join."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src" / "workhorse"
MARKER = "<!-- module-map -->"


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    prose = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=\.)\s", prose, maxsplit=1)[0].replace("``", "`")
    if len(sentence) > 180:
        sentence = sentence[:177].rsplit(" ", 1)[0] + " ..."
    if sentence.count("`") % 2:  # a cut inside inline code: close it
        sentence += "`"
    return sentence.replace("|", "\\|")


def module_map(src: Path = SRC) -> str:
    rows = ["| module | what it is for |", "|---|---|"]
    for path in sorted(src.rglob("*.py"), key=lambda p: p.relative_to(src).parts):
        rel = path.relative_to(src)
        name = ".".join(("workhorse", *rel.with_suffix("").parts)).removesuffix(".__init__")
        rows.append(f"| `{name}` | {first_sentence(path)} |")
    return "\n".join(rows) + f"\n\n{len(rows) - 2} modules, read from the source when this page was built.\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    return markdown.replace(MARKER, module_map()) if MARKER in markdown else markdown
