"""A worker frozen (SIGSTOP) while holding jobs claimed ahead, then thawed (SIGCONT) after their
leases lapsed and another worker ran them: the thawed worker must start none of them.

A GC pause, a VM migration or a laptop's sleep is the same fault. The thawed process's own clock
says the windows closed; nothing else has to tell it.
"""

from __future__ import annotations

import asyncio
import signal
import time

import psycopg
import pytest
from processkit import Spawn, ledger, wait_for

pytestmark = pytest.mark.process

HELD = "select count(*) from {schema}.jobs where state = 'running' and worker_id = %s"
WORKER_OF = "select id from {schema}.workers where pid = %s"


def scalar(url: str, sql: str, *args: object) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, args).fetchone()  # type: ignore[arg-type]
        return None if row is None else row[0]


def test_a_thawed_worker_starts_none_of_the_jobs_whose_leases_lapsed(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import procapp

    async def enqueue() -> None:
        await procapp.noop.enqueue_many(list(range(300)))
        await procapp.app.close()

    asyncio.run(enqueue())
    frozen = spawn("--concurrency", "1", "--visibility-timeout", "1s", "--no-scheduler")
    worker_id = None

    def registered() -> bool:
        nonlocal worker_id
        worker_id = scalar(database_url, WORKER_OF.format(schema=schema), frozen.pid)
        return worker_id is not None

    wait_for(registered, 20, "the worker to register")
    held = 0
    for _ in range(50):  # freeze it at a moment it holds jobs claimed ahead of its one slot
        wait_for(lambda: len(ledger(database_url, schema)) > 20, 20, "bodies short enough to claim ahead")
        frozen.send_signal(signal.SIGSTOP)
        held = int(scalar(database_url, HELD.format(schema=schema), worker_id))  # type: ignore[arg-type]
        if held >= 4:
            break
        frozen.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    assert held >= 4, "the worker never held jobs claimed ahead"
    try:
        time.sleep(1.5)  # every lease it holds lapses
        spawn("--concurrency", "4", "--visibility-timeout", "5s", "--no-scheduler")
        wait_for(
            lambda: scalar(database_url, f"select count(*) from {schema}.jobs where state = 'done'") == 300,
            60,
            "the second worker to finish every job",
        )
        before = sum(1 for row in ledger(database_url, schema) if row[2] == frozen.pid)
    finally:
        frozen.send_signal(signal.SIGCONT)
    time.sleep(2.0)  # its heartbeat finds the windows closed; the old code started the jobs within ms
    after = sum(1 for row in ledger(database_url, schema) if row[2] == frozen.pid)
    # At most the body that was mid-write when frozen lands its start row now; none of the
    # (held - 1) runs waiting in its buffer may start.
    assert after - before <= 1, f"the thawed worker started {after - before} run(s) of {held} it held"
    assert frozen.poll() is None  # it lives on
    runs = [row[0] for row in ledger(database_url, schema)]
    assert len(set(runs)) == 300
