"""Helpers for the process tests: the execution ledger, waiting, reading a job's state, spawning workers."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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


def spawner(app_spec: str, proc_env: dict[str, str], logs: Path) -> Iterator[Spawn]:
    """Start `workhorse --app APP worker ARGS...` subprocesses, each logging to a file of its own
    under ``logs``; at the end every one still running is killed (thawed first: a stopped process
    ignores SIGKILL until it runs again on some systems, and a test may leave one stopped)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        log = open(logs / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", app_spec, "worker", *args],
            env=proc_env,
            cwd=HERE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()
