"""A module docstring says what the module is for, in at most five lines; the design goes to docs/."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "workhorse"
MAX_LINES = 5


def test_every_module_docstring_is_five_lines_at_most() -> None:
    long = {}
    for path in sorted(SRC.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc and len(doc.splitlines()) > MAX_LINES:
            long[str(path.relative_to(SRC))] = len(doc.splitlines())
    assert not long, f"module docstrings over {MAX_LINES} lines (move the design to docs/how-it-works/): {long}"
