"""A second SIGTERM ends a worker within seconds whatever its settle is doing: here the settle of a
finished job waits on a row lock another session holds, and never lands while the lock is held."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time

import psycopg
import pytest
from processkit import Spawn, job_state, ledger, wait_for

pytestmark = pytest.mark.process


def settle_waits_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity "
            "where application_name like 'workhorse:settle%%' and wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize("scheduler", [False, True], ids=["worker-alone", "with-scheduler"])
def test_a_second_sigterm_ends_the_worker_while_its_settle_cannot_land(
    spawn: Spawn, database_url: str, schema: str, scheduler: bool
) -> None:
    import procapp

    ref = procapp.sleeper.enqueue_sync({"sleep": 0.5})
    worker = spawn("--drain-timeout", "60s", *([] if scheduler else ["--no-scheduler"]))
    wait_for(lambda: len(ledger(database_url, schema)) == 1, 20, "the job to start")
    with psycopg.connect(database_url) as holder:  # a transaction left open, holding the job's row
        holder.execute(f"select id from {schema}.jobs where id = %s for update", (ref.id,))  # type: ignore[arg-type]
        wait_for(lambda: settle_waits_on_a_lock(database_url), 20, "the settle to wait on the row lock")
        worker.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert worker.poll() is None  # draining: the finished job's settle is still in flight
        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(timeout=20)
        took = time.monotonic() - began
        assert worker.poll() is not None, "the worker ignored its second SIGTERM"
        assert took < 10
        holder.rollback()
    assert job_state(procapp.app, ref.id) == ("running", 1)  # its lease lapses; the next claim takes it


def test_a_body_raising_text_postgres_cannot_store_jams_nothing_and_sigterm_drains(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    """The issue's own reproduction, in a real worker: its settle failed on every try while the
    heartbeat kept the lease, five plain jobs stayed running behind it, and SIGTERM was ignored."""
    import procapp

    bad = procapp.hostile.enqueue_sync(None)
    plain = [procapp.noop.enqueue_sync(n) for n in range(5)]
    worker = spawn("--no-scheduler", "--drain-timeout", "5s")
    wait_for(lambda: job_state(procapp.app, bad.id)[0] == "dead", 20, "the hostile job to be dead-lettered")
    wait_for(lambda: all(job_state(procapp.app, r.id)[0] == "done" for r in plain), 20, "the plain jobs to settle")
    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    assert time.monotonic() - began < 5
