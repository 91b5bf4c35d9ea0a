"""The scheduler leader purging under a live queue: a real `workhorse worker` (with its scheduler
role, retentionapp's short policy) drains jobs enqueued in waves while the leader purges every
done row it finds. Every job runs exactly once, no live job (ready, delayed, running, suspended)
is ever removed, and the done rows do not stay in the table."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from processkit import HERE, wait_for

from workhorse import App, JobContext

pytestmark = pytest.mark.process

WAVES = 17.0  # seconds of enqueueing: the leader's second round (15 s after its first) falls inside
WAVE = 25  # jobs per wave
PAUSE = 0.5  # seconds between waves
PURGED = re.compile(r"purged (?P<what>.*?) \(and (?P<steps>\d+) steps\)")


def start(env: dict[str, str], log: Path, spec: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", spec, "worker", "--drain-timeout", "1s"],
            env=env,
            cwd=HERE,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(worker: subprocess.Popen[bytes]) -> int:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        return worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
        raise


def query(url: str, statement: str, schema: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement.format(s=schema)).fetchall()


def enqueuer(url: str, schema: str) -> App:
    """An App on the test's schema that knows retentionapp's job names (to enqueue them)."""
    app = App(url, schema=schema)
    for name in ("tick", "hold", "napper"):

        @app.job(name=name, tenant="none")
        async def body(ctx: JobContext, payload: object) -> None:
            raise AssertionError("runs in the worker subprocess only")

    return app


def purged_done(log: Path) -> tuple[int, int]:
    """From the worker's log: done rows the leader's purges removed in all, and how many purges
    removed something."""
    total = purges = 0
    for match in PURGED.finditer(log.read_text(errors="replace")):
        purges += 1
        done = re.search(r"\bdone (\d+)", match.group("what"))
        total += int(done.group(1)) if done else 0
    return total, purges


def test_the_leader_purges_done_rows_under_a_live_queue_and_loses_nothing(
    proc_env: dict[str, str], database_url: str, schema: str, tmp_path: Path
) -> None:
    import asyncio

    log = tmp_path / "worker.log"
    app = enqueuer(database_url, schema)
    worker = start(proc_env, log, "retentionapp:app")
    try:
        wait_for(
            lambda: (
                query(database_url, "select count(*) from {s}.leaders where expires_at > now()", schema)[0][0] == 1
                and query(database_url, "select count(*) from {s}.workers", schema)[0][0] == 1
            ),
            60,
            "the worker to register and its scheduler to lead",
        )

        async def live_ones() -> dict[str, list[str]]:
            delayed = [(await app.jobs["tick"].enqueue(-1, delay="1h")).id for _ in range(5)]
            held = [(await app.jobs["hold"].enqueue(None)).id]
            napping = [(await app.jobs["napper"].enqueue(None)).id for _ in range(3)]
            return {"delayed": delayed, "running": held, "suspended": napping}

        async def waves() -> tuple[list[str], bool]:
            ids: list[str] = []
            purged_while_live = False
            done_seen = 0
            deadline = time.monotonic() + WAVES
            n = 0
            while time.monotonic() < deadline:
                refs = await app.jobs["tick"].enqueue_many(list(range(n, n + WAVE)))
                ids += [r.id for r in refs]
                n += WAVE
                await asyncio.sleep(PAUSE)
                done_now = query(database_url, "select count(*) from {s}.jobs where state = 'done'", schema)[0][0]
                assert isinstance(done_now, int)
                if done_now < done_seen:
                    purged_while_live = True  # done rows went while this wave was still queued
                done_seen = done_now
            return ids, purged_while_live

        async def body() -> tuple[dict[str, list[str]], list[str], bool]:
            try:
                live = await live_ones()
                ids, mid_run = await waves()
                return live, ids, mid_run
            finally:
                await app.close()

        began = time.monotonic()
        live, ticks, purged_mid_run = asyncio.run(body())
        print(f"{len(ticks)} jobs enqueued in {time.monotonic() - began:.1f}s")
        live_ids = [i for ids in live.values() for i in ids]

        def ran() -> int:
            return int(str(query(database_url, "select count(*) from {s}.ledger where event = 'ran'", schema)[0][0]))

        wait_for(lambda: ran() == len(ticks), 30, f"all {len(ticks)} ticks to run")
        # The leader's next round purges what the last waves left done.
        wait_for(
            lambda: query(database_url, "select count(*) from {s}.jobs where state = 'done'", schema)[0][0] == 0,
            25,
            "the leader to purge the last done rows",
        )
        # That purge logs once it is through every target; a stop before then would cancel it unlogged.
        wait_for(lambda: purged_done(log)[0] == len(ticks), 20, "the leader to log its last purge")
        states = {str(i): str(st) for i, st in query(database_url, "select id::text, state from {s}.jobs", schema)}
    finally:
        code = stop(worker)
    print(log.read_text(errors="replace")[-3000:])

    # Exactly once: one ledger row per tick, every tick enqueued ran, nothing ran that was not.
    runs = query(database_url, "select job_id::text, count(*) from {s}.ledger where event = 'ran' group by 1", schema)
    assert {str(j): n for j, n in runs} == dict.fromkeys(ticks, 1)
    # No live job removed: the delayed, running and suspended ones are all still there, as they were.
    assert {i: states.get(i) for i in live["delayed"]} == dict.fromkeys(live["delayed"], "delayed")
    assert {i: states.get(i) for i in live["running"]} == dict.fromkeys(live["running"], "running")
    assert {i: states.get(i) for i in live["suspended"]} == dict.fromkeys(live["suspended"], "suspended")
    # And the table kept nothing else: every done tick was purged, none of them is left.
    assert sorted(states) == sorted(live_ids)
    napper_steps = query(database_url, "select count(*) from {s}.steps", schema)[0][0]
    assert napper_steps == 2 * len(live["suspended"])
    # The leader's own account: its purges removed exactly the ticks, each once, over more than one
    # purge, and at least one of them while waves were still queued behind it.
    total, purges = purged_done(log)
    assert total == len(ticks), (total, len(ticks))
    assert purges >= 2 and purged_mid_run
    assert code == 0, log.read_text(errors="replace")[-3000:]


def test_a_worker_of_an_app_with_no_task_purges_on_its_own(
    proc_env: dict[str, str], database_url: str, schema: str, tmp_path: Path
) -> None:
    import asyncio

    log = tmp_path / "worker.log"
    app = enqueuer(database_url, schema)

    async def enqueue() -> list[str]:
        try:
            return [r.id for r in await app.jobs["tick"].enqueue_many(list(range(20)))]
        finally:
            await app.close()

    ids = asyncio.run(enqueue())
    worker = start(proc_env, log, "retentionapp:taskless")
    try:
        wait_for(
            lambda: query(database_url, "select count(*) from {s}.ledger where event = 'ran'", schema)[0][0] == 20,
            30,
            "the ticks to run",
        )
        # every="1s" (jittered by 10%): a purge on the role's own clock is due within 1.1 s.
        wait_for(
            lambda: query(database_url, "select count(*) from {s}.jobs", schema)[0][0] == 0,
            6,
            f"the {len(ids)} done rows to be purged",
        )
    finally:
        stop(worker)
