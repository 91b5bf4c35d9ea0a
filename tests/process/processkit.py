"""Helpers for the process tests: the execution ledger, waiting, reading a job's state."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from workhorse import App

HERE = Path(__file__).parent
Spawn = Callable[..., subprocess.Popen[bytes]]


def ledger(url: str, schema: str) -> list[tuple[str, int, int, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(  # type: ignore[return-value]
            f"select job_id::text, attempt, pid, event from {schema}.ledger order by at"  # type: ignore[arg-type]
        ).fetchall()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_state(app: App, job_id: str) -> tuple[str, int]:
    async def read() -> tuple[str, int]:
        job = await app.get_job(job_id)
        await app.close()
        assert job is not None
        return job.state, job.attempt

    return asyncio.run(read())
