"""Fleets of real worker processes: exactly-once across two workers, a SIGKILL in the middle,
an event-loop-blocking body that keeps its lease, and a killed LISTEN connection."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from processkit import Spawn, job_state, ledger, wait_for

pytestmark = pytest.mark.process


def overlaps(url: str, schema: str, killed_at: object) -> int:
    """How many executions of one job overlapped another of the same job (from the ledger). A run
    with no end was killed: it ended at ``killed_at``."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"""
            with runs as (
                select s.job_id, s.attempt, s.at as started,
                       (select min(e.at) from {schema}.ledger e
                        where e.job_id = s.job_id and e.attempt = s.attempt and e.event = 'end') as ended
                from {schema}.ledger s where s.event = 'start'
            )
            select count(*) from runs a join runs b
              on a.job_id = b.job_id and a.attempt < b.attempt
             and b.started < coalesce(a.ended, %s)
            """,  # type: ignore[arg-type]
            (killed_at,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def counts(url: str, schema: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"select state, count(*) from {schema}.jobs group by state"  # type: ignore[arg-type]
        ).fetchall()
    return dict(rows)


def test_two_workers_run_a_thousand_jobs_each_exactly_once(spawn: Spawn, database_url: str, schema: str) -> None:
    import procapp

    procapp.noop.app.migrate_sync()
    import asyncio

    async def enqueue() -> None:
        await procapp.noop.enqueue_many(list(range(1000)))
        await procapp.app.close()

    asyncio.run(enqueue())
    workers = [spawn("--concurrency", "10", "--no-scheduler") for _ in range(2)]
    wait_for(lambda: counts(database_url, schema).get("done", 0) == 1000, 60, "1000 jobs done")
    rows = ledger(database_url, schema)
    assert len(rows) == 1000 and len({r[0] for r in rows}) == 1000
    assert {r[2] for r in rows} == {w.pid for w in workers}  # both took a share
    for w in workers:
        w.send_signal(signal.SIGTERM)
        assert w.wait(timeout=30) == 0


def test_a_sigkill_in_the_middle_loses_nothing_and_runs_nothing_twice_at_once(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import asyncio

    import procapp

    async def enqueue() -> None:
        await procapp.sleeper.enqueue_many([{"sleep": 0.05}] * 300)
        await procapp.app.close()

    asyncio.run(enqueue())
    victim = spawn("--concurrency", "10", "--visibility-timeout", "2s", "--no-scheduler")
    survivor = spawn("--concurrency", "10", "--visibility-timeout", "2s", "--no-scheduler")
    wait_for(lambda: counts(database_url, schema).get("done", 0) >= 60, 60, "some progress")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    with psycopg.connect(database_url) as conn:
        killed_at = conn.execute("select clock_timestamp()").fetchone()[0]  # type: ignore[index]
    wait_for(lambda: counts(database_url, schema).get("done", 0) == 300, 60, "every job done")
    assert overlaps(database_url, schema, killed_at) == 0
    with psycopg.connect(database_url) as conn:
        reclaimed = conn.execute(
            f"select count(*) from {schema}.jobs where attempt = 2"  # type: ignore[arg-type]
        ).fetchone()
    assert reclaimed is not None and reclaimed[0] >= 1  # the victim held jobs; they ran again
    assert survivor.poll() is None


@pytest.mark.parametrize("role", ["claim", "settle", "heartbeat"])
def test_killing_one_role_connection_mid_drain_loses_nothing(
    spawn: Spawn, database_url: str, schema: str, role: str
) -> None:
    """pg_terminate_backend of the worker's claim, settle or heartbeat session in the middle of a
    drain: that role reconnects on its own, every job ends done, none ran twice at once, and the
    process neither dies nor needs a restart."""
    import asyncio

    import procapp

    async def enqueue() -> None:
        await procapp.sleeper.enqueue_many([{"sleep": 0.05}] * 300)
        await procapp.app.close()

    asyncio.run(enqueue())
    worker = spawn("--concurrency", "10", "--visibility-timeout", "2s", "--no-scheduler")
    wait_for(lambda: counts(database_url, schema).get("done", 0) >= 60, 60, "some progress")

    def kill() -> int:  # only this test's worker: its sessions last ran a statement on our schema
        with psycopg.connect(database_url, autocommit=True) as conn:
            return len(
                conn.execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity "
                    "where application_name = %s and query like %s",
                    (f"workhorse:{role}", f"%{schema}.%"),
                ).fetchall()
            )

    wait_for(lambda: kill() >= 1, 10, f"the worker's {role} session")
    with psycopg.connect(database_url) as conn:
        killed_at = conn.execute("select clock_timestamp()").fetchone()[0]  # type: ignore[index]
    wait_for(lambda: counts(database_url, schema).get("done", 0) == 300, 60, "every job done")
    assert overlaps(database_url, schema, killed_at) == 0
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


def test_a_body_that_blocks_the_event_loop_keeps_its_lease(
    spawn: Spawn, database_url: str, schema: str, tmp_path: object
) -> None:
    import procapp

    ref = procapp.blocker.enqueue_sync({"block": 4.0})
    blocked = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: len(ledger(database_url, schema)) == 1, 20, "the blocking body to start")
    other = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: job_state(procapp.app, ref.id)[0] == "done", 30, "the blocking job to finish")
    assert job_state(procapp.app, ref.id) == ("done", 1)  # never re-claimed by the other worker
    starts = [r for r in ledger(database_url, schema) if r[3] == "start"]
    assert len(starts) == 1 and starts[0][2] == blocked.pid
    blocked.send_signal(signal.SIGTERM)
    other.send_signal(signal.SIGTERM)
    assert blocked.wait(timeout=30) == 0 and other.wait(timeout=30) == 0
    assert blocked.stdout is None  # output went to the log file; read it for the warning
    log = (tmp_path / "worker-0.log").read_text()  # type: ignore[operator]
    assert "blocker" in log and "has not answered" in log


def test_killing_the_listen_connection_the_worker_reconnects_and_keeps_working(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import procapp

    worker = spawn("--no-scheduler")
    first = procapp.noop.enqueue_sync(1)
    wait_for(lambda: job_state(procapp.app, first.id)[0] == "done", 20, "the first job")

    def listen_pids() -> list[int]:
        with psycopg.connect(database_url, autocommit=True) as conn:
            return [
                r[0]
                for r in conn.execute(
                    "select pid from pg_stat_activity where application_name = 'workhorse:listen'"
                ).fetchall()
            ]

    wait_for(lambda: len(listen_pids()) >= 1, 20, "the LISTEN connection")
    with psycopg.connect(database_url, autocommit=True) as conn:
        for pid in listen_pids():
            conn.execute("select pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    second = procapp.noop.enqueue_sync(2)  # picked up by polling or the rebuilt listener
    wait_for(lambda: job_state(procapp.app, second.id)[0] == "done", 20, "a job after the kill")
    wait_for(lambda: len(listen_pids()) >= 1, 30, "the LISTEN connection to come back")
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
