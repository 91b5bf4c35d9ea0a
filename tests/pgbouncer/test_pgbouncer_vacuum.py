"""The leader's vacuum and the health report through a transaction-mode PgBouncer: the vacuum runs,
and nothing of its session (no statement_timeout) reaches the pool's later clients."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

from workhorse import App
from workhorse.leader.vacuum import VacuumDuty

sys.path.insert(0, str(Path(__file__).parents[1] / "health"))
from healthkit import dead_rows, declare, jobs_with_dead_rows, pinned_before, vacuum_count


async def test_the_vacuum_through_the_bouncer_leaks_nothing(
    bouncer_url: str, database_url: str, schema: str, pooled: None
) -> None:
    direct = App(database_url, schema=schema)
    await direct.migrate()
    declare(direct)
    churned_at = await jobs_with_dead_rows(direct, jobs=2000, updates=2)
    await direct.close()

    app = App(bouncer_url, schema=schema)
    duty = VacuumDuty("s-bouncer", lambda: app.driver, base=1000)
    pinned = pinned_before(database_url, churned_at)
    assert await duty.turn() == "jobs"
    assert vacuum_count(database_url, schema) == 1
    if not pinned:  # (another test's long transaction on the shared server would keep them)
        assert dead_rows(database_url, schema) < 100
    report = await app.admin.health()
    assert report is not None and report.autovacuum is False
    await app.close()
    for _ in range(20):  # the pool's server connections, as later clients get them
        with psycopg.connect(bouncer_url, autocommit=True, prepare_threshold=None) as conn:
            row = conn.execute("show statement_timeout").fetchone()
            assert row is not None and row[0] == "0"
