"""A worker rides out PostgreSQL restarts (fast and immediate) on a server of the test's own."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from processkit import HERE, wait_for

from workhorse import App, JobContext, embedded

pytestmark = pytest.mark.process


def enqueue(url: str, count: int) -> None:
    """Enqueue, retrying while the server is coming back (an enqueue may fail; it never half-lands)."""
    app = App(url, schema="faults")

    @app.job(name="file_sleeper", tenant="none")
    async def sleeper(ctx: JobContext, payload: object) -> None:
        return None

    async def run() -> None:
        for _ in range(100):
            try:
                await sleeper.enqueue_many([{"sleep": 0.05}] * count)
                break
            except Exception:  # the server is restarting: try again shortly
                await asyncio.sleep(0.2)
        await app.close()

    asyncio.run(run())


def registered(url: str) -> bool:
    with psycopg.connect(url, connect_timeout=2) as conn:
        row = conn.execute("select count(*) from faults.workers").fetchone()
    return row is not None and row[0] >= 1


def done(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("select count(*) from faults.jobs where state = 'done'").fetchone()
    except psycopg.OperationalError:
        return -1
    assert row is not None
    return int(row[0])


def overlapping_runs(ledger: Path) -> int:
    """Executions of one job that overlapped in time, from the worker's file ledger."""
    runs: dict[tuple[str, str], list[float]] = {}
    for line in ledger.read_text().splitlines():
        job, attempt, _pid, _event, at = line.split()
        runs.setdefault((job, attempt), []).append(float(at))
    by_job: dict[str, list[tuple[float, float]]] = {}
    for (job, _attempt), stamps in runs.items():
        by_job.setdefault(job, []).append((min(stamps), max(stamps)))
    overlaps = 0
    for intervals in by_job.values():
        intervals.sort()
        overlaps += sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])
    return overlaps


def test_a_worker_survives_fast_and_immediate_restarts(own_server: tuple[Path, str], tmp_path: Path) -> None:
    home, url = own_server
    ledger = tmp_path / "ledger.txt"
    env = {
        **os.environ,
        "WORKHORSE_DATABASE_URL": url,
        "WORKHORSE_TEST_SCHEMA": "faults",
        "WORKHORSE_TEST_LEDGER": str(ledger),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(
        [sys.executable, "-m", "workhorse", "--app", "procapp:app", "migrate"],
        env=env,
        cwd=HERE,
        check=True,
        capture_output=True,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "create table faults.ledger (job_id uuid, attempt int, pid int, event text, "
            "at timestamptz default clock_timestamp())"
        )
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", "procapp:app", "worker", "--visibility-timeout", "3s"],
            env=env,
            cwd=HERE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # Restart only once the worker is up: a server that goes away during its start-up check is
        # a failed start (the process exits non-zero), not the outage this test is about.
        wait_for(lambda: registered(url), 60, "the worker to register")
        total = 0
        for mode in ("fast", "immediate"):
            enqueue(url, 100)
            total += 100
            time.sleep(0.3)  # some are running when the server goes away
            embedded.restart(home, mode=mode)
            wait_for(lambda n=total: done(url) == n, 60, f"every job done after a {mode} restart")  # type: ignore[misc]
            assert worker.poll() is None, "the worker process died with the database"
        assert overlapping_runs(ledger) == 0  # nothing ran twice at the same moment
        lines = ledger.read_text().splitlines()
        assert len({line.split()[0] for line in lines}) == total  # every job ran
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
