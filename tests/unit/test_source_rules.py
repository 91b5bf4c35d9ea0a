"""Rules the source tree keeps: the public surface, no whole-row reads, one clock."""

from __future__ import annotations

import re
from pathlib import Path

import workhorse

SRC = Path(workhorse.__file__).parent


def _code_lines(path: Path) -> list[tuple[int, str]]:
    return [(i, line.split("#", 1)[0]) for i, line in enumerate(path.read_text().splitlines(), 1)]


def test_all_is_sorted_and_complete() -> None:
    assert list(workhorse.__all__) == sorted(workhorse.__all__)
    for name in workhorse.__all__:
        assert hasattr(workhorse, name), name
    public = {n for n in vars(workhorse) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(workhorse.__all__)


def test_the_storage_interface_is_private() -> None:
    """``Driver`` is workhorse's own seam, not a plug-in point: PostgreSQL is the one queue."""
    assert "Driver" not in workhorse.__all__ and not hasattr(workhorse, "Driver")


def test_no_statement_reads_or_returns_a_whole_row() -> None:
    offenders = [
        f"{path.relative_to(SRC)}:{i}"
        for path in SRC.rglob("*.py")
        for i, line in _code_lines(path)
        if re.search(r"\b(select|returning)\s+\*", line, re.IGNORECASE)
    ]
    for path in SRC.rglob("*.sql"):
        offenders += [
            f"{path.name}:{i}"
            for i, line in _code_lines(path)
            if re.search(r"\b(select|returning)\s+\*", line, re.IGNORECASE)
        ]
    assert offenders == []


def test_sql_lives_in_the_queries_modules() -> None:
    """Statements against workhorse tables are named constants in _db/queries or in a feature's
    ``queries.py`` (``outbox/queries.py``, beside the feature that owns them), nowhere else."""
    allowed = {SRC / "_db" / "queries", SRC / "_db" / "migrations"}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "queries.py" or any(parent in allowed for parent in path.parents):
            continue
        for i, line in _code_lines(path):
            if re.search(r"\b(insert\s+into|update\s+\{schema\}|delete\s+from|from\s+\{schema\})", line, re.I):
                offenders.append(f"{path.relative_to(SRC)}:{i}")
    assert offenders == []


def test_decisions_never_read_the_local_clock() -> None:
    """Due times, leases and backoff are decided on the database clock. A local wall-clock read
    must say why it is harmless (`clock-ok`); monotonic time (durations, timeouts) is fine."""
    pattern = re.compile(r"datetime\.now\(|datetime\.utcnow\(|time\.time\(|time\.time_ns\(")
    offenders = [
        f"{path.relative_to(SRC)}:{i}"
        for path in SRC.rglob("*.py")
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and "clock-ok" not in line
    ]
    assert offenders == []
