"""Helpers for the scheduler tests: SQL on a fresh connection, a subprocess's log, waiting."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

HERE = Path(__file__).parent
Spawn = Callable[..., subprocess.Popen[bytes]]


def log_of(proc: subprocess.Popen[bytes]) -> str:
    return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]


def sql(url: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Finisher:
    """Marks fired jobs done as soon as they appear, in a thread, so the live-key unique index
    cannot hide a second fire of the same occurrence: only the watermark fence can stop it."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Finisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(0.1):
                conn.execute(
                    f"update {self.schema}.jobs set state = 'done', finished_at = now() "  # type: ignore[arg-type]
                    "where state in ('ready', 'delayed')"
                )


def occurrences(url: str, schema: str) -> list[str]:
    """Every fired job's scheduled_at, in order (duplicates kept)."""
    rows = sql(url, f"select payload->>'scheduled_at' from {schema}.jobs where name = 'tick' order by 1")
    return [str(r[0]) for r in rows]


def leader_pid(url: str, schema: str) -> int | None:
    rows = sql(url, f"select pid from {schema}.leaders where expires_at > now()")
    return int(rows[0][0]) if rows else None  # type: ignore[call-overload]
