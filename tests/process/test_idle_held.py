"""What a worker costs the database while a cap holds its whole backlog back (issue 14): about
what an idle worker costs. No busy loop: nothing is claimed and handed back, and the worker does
not poll faster because work is waiting."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from processkit import HERE
from test_idle import statements

from workhorse import App, JobContext

pytestmark = pytest.mark.process

WINDOW = 30.0  # seconds measured
IDLE_PER_MINUTE = 6  # a worker without its scheduler role (bench W4: 6.0 a minute)
BUDGET_PER_MINUTE = 10  # held back, the worker may cost a little more than idle, never a poll loop
BACKLOG = 500

# The cap's one slot, held by a run of a worker that is gone but whose lease is live for an hour.
HOLD_SLOT = """
update workhorse.jobs set state = 'running', attempt = 1, claims = 1, worker_id = 'w-elsewhere',
       lease_expires_at = now() + interval '1 hour', started_at = now()
where id = (select id from workhorse.jobs order by id limit 1)
"""


def test_a_backlog_held_back_by_a_cap_costs_about_what_an_idle_worker_costs(
    database_url: str, dedicated_database: str
) -> None:
    env = {
        **os.environ,
        "WORKHORSE_DATABASE_URL": dedicated_database,
        "WORKHORSE_TEST_SCHEMA": "workhorse",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(
        [sys.executable, "-m", "workhorse", "--app", "heldapp:app", "migrate"],
        env=env,
        cwd=HERE,
        check=True,
        capture_output=True,
    )
    app = App(dedicated_database, schema="workhorse")  # the same declaration as heldapp's

    @app.job(name="capped", tenant="none", concurrency=1)
    async def capped(ctx: JobContext, payload: int) -> int:
        return payload

    async def fill() -> None:
        await capped.enqueue_many(list(range(BACKLOG)))
        await app.close()

    asyncio.run(fill())
    with psycopg.connect(dedicated_database, autocommit=True) as conn:
        conn.execute(HOLD_SLOT)
    worker = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "--app", "heldapp:app", "worker", "--no-scheduler"],
        env=env,
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    name = psycopg.conninfo.conninfo_to_dict(dedicated_database)["dbname"]
    try:
        deadline = time.monotonic() + 60
        with psycopg.connect(dedicated_database, autocommit=True) as conn:
            while not conn.execute("select count(*) from workhorse.workers").fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "the worker did not register within a minute"
                time.sleep(0.1)
        time.sleep(2.0)
        per_role = statements(database_url, str(name), WINDOW)
        with psycopg.connect(dedicated_database, autocommit=True) as conn:
            states = dict(conn.execute("select state, count(*) from workhorse.jobs group by state").fetchall())
            spent = conn.execute(
                "select count(*) from workhorse.jobs where state = 'ready' and (attempt > 0 or last_error is not null)"
            ).fetchone()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    per_minute = sum(per_role.values()) * 60 / WINDOW
    print(f"held back: {per_role} in {WINDOW:.0f} s = {per_minute:.1f} statements a minute (idle: {IDLE_PER_MINUTE})")
    assert states == {"running": 1, "ready": BACKLOG - 1}, states  # the cap held: nothing else ran
    assert spent == (0,), "a held-back job had an attempt spent or an error written"
    assert per_role, "no statement seen at all: the sampling is broken"
    assert per_minute <= BUDGET_PER_MINUTE, f"{per_minute:.1f} statements a minute held back: {per_role}"
