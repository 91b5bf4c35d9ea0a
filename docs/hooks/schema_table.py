"""MkDocs hook: the migrations list of reference/schema.md, read from the migration files at
build time (their number, the tables each creates, and the first sentence of its header comment),
so the page names every migration the code ships and no other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DB = Path(__file__).resolve().parents[2] / "src" / "workhorse" / "_db"
MARKERS = {"<!-- migrations-table -->": "migrations", "<!-- outbox-migrations-table -->": "outbox_migrations"}
CREATES = re.compile(r"create table (?:if not exists )?\{schema\}\.(\w+)", re.I)


def summary(sql: str) -> str:
    comment = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        text = line.removeprefix("--").strip()
        if not text:
            break
        comment.append(text)
    prose = re.sub(r"^\d+:\s*", "", " ".join(comment))
    prose = re.sub(r"\s*Placeholder \{schema\} is replaced by the (validated )?schema( name)?\.?", "", prose)
    first = re.split(r"(?<=\.)\s", prose, maxsplit=1)[0]
    return first.replace("|", "\\|").rstrip(":;")


def table(folder: str) -> str:
    rows = ["| migration | creates | what it does |", "|---|---|---|"]
    for path in sorted((DB / folder).glob("*.sql")):
        sql = path.read_text(encoding="utf-8")
        tables = ", ".join(f"`{t}`" for t in dict.fromkeys(CREATES.findall(sql)))
        rows.append(f"| `{path.stem}` | {tables} | {summary(sql)} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    for marker, folder in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, table(folder))
    return markdown
