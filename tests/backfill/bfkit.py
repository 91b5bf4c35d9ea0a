"""What the backfill tests read: the user's table and the ledger, straight from PostgreSQL."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from workhorse.context import JobContext

ROWS = 100  # the rows of `items` the bfapp fixture creates
Spawn = Callable[..., subprocess.Popen[bytes]]


def items(url: str, schema: str) -> list[tuple[int, str | None, int]]:
    with psycopg.connect(url) as conn:
        return conn.execute(f"select id, slug, hits from {schema}.items order by id").fetchall()  # type: ignore[arg-type,return-value]


def passes(url: str, schema: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(  # type: ignore[return-value]
            f"select id, name, status, rows, batches, cursor, checksum, ran_as, forced, environment, "  # type: ignore[arg-type]
            f"job_id::text as job_id, remaining, error, finished_at from {schema}.backfill_passes order by id"
        ).fetchall()


def table(url: str, schema: str, name: str) -> list[tuple[Any, ...]]:
    """Every row of ``schema.name`` in a stable order (to compare a table before and after)."""
    with psycopg.connect(url) as conn:
        return conn.execute(f"select to_jsonb(t)::text from {schema}.{name} as t order by 1").fetchall()  # type: ignore[arg-type]


def context(job_id: str, *, attempt: int = 1, max_attempts: int = 5) -> JobContext:
    """A context as a worker would make it, for calling a pass's body directly."""
    return JobContext(
        id=job_id,
        name="workhorse.backfill",
        queue="default",
        tenant=None,
        attempt=attempt,
        max_attempts=max_attempts,
        worker_id="test",
        logger=logging.getLogger("test"),
    )
