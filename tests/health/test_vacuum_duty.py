"""The leader's vacuum duty against a real PostgreSQL (autovacuum is off on the tests' server)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from healthkit import dead_rows, declare, jobs_with_dead_rows, pinned_before, vacuum_count

from workhorse import App
from workhorse.errors import ConfigurationError
from workhorse.leader.scheduler import Scheduler
from workhorse.leader.vacuum import VacuumDuty, vacuum_setting


@pytest.fixture
async def churned(database_url: str, schema: str) -> AsyncIterator[App]:
    """A fresh schema whose jobs table holds 4,000 dead rows beside 2,000 live ones."""
    app = App(database_url, schema=schema)
    await app.migrate()
    declare(app)
    app.churned_at = await jobs_with_dead_rows(app, jobs=2000, updates=2)  # type: ignore[attr-defined]
    yield app
    await app.close()


def duty(app: App, **options: object) -> VacuumDuty:
    return VacuumDuty("s-test", lambda: app.driver, **options)  # type: ignore[arg-type]


async def test_the_duty_vacuums_a_table_past_its_threshold(
    churned: App, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = dead_rows(database_url, churned.schema)
    assert before >= 4000
    caplog.set_level(logging.INFO, logger="workhorse.scheduler")
    chore = duty(churned, base=1000)  # threshold 1,000 + 5% of 2,000 live = 1,100
    pinned = pinned_before(database_url, churned.churned_at)  # type: ignore[attr-defined]
    assert await chore.turn() == "jobs"
    assert chore.vacuumed == ["jobs"] and vacuum_count(database_url, churned.schema) == 1
    if not pinned:  # (another test's long transaction on the shared server would keep them)
        assert dead_rows(database_url, churned.schema) < 100
    line = next(r.getMessage() for r in caplog.records if "vacuumed" in r.getMessage())
    assert f"vacuumed {churned.schema}.jobs in " in line and "4,000 dead rows" in line
    # vacuumed just now: the next turn leaves it alone (and nothing else is past its threshold)
    assert await chore.turn() is None


async def test_the_duty_leaves_a_table_below_its_threshold(churned: App, database_url: str) -> None:
    before = dead_rows(database_url, churned.schema)
    chore = duty(churned, base=before + 1)
    assert await chore.turn() is None
    assert chore.vacuumed == []
    assert dead_rows(database_url, churned.schema) == before


async def test_a_locked_table_is_skipped_not_waited_for(
    churned: App, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workhorse.scheduler")
    before = dead_rows(database_url, churned.schema)
    with psycopg.connect(database_url) as holder:
        holder.execute(f"lock table {churned.schema}.jobs in share update exclusive mode")  # type: ignore[arg-type]
        started = time.monotonic()
        answer = await asyncio.wait_for(duty(churned, base=1000).turn(), timeout=30)
        took = time.monotonic() - started
        holder.rollback()
    assert answer is None and took < 20
    assert dead_rows(database_url, churned.schema) == before
    assert any("was skipped" in r.getMessage() for r in caplog.records)


async def test_switched_off_it_vacuums_nothing_and_says_what_to_run(
    churned: App, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workhorse.scheduler")
    before = dead_rows(database_url, churned.schema)
    chore = duty(churned, base=1000, enabled=False)
    assert await chore.turn() is None
    assert dead_rows(database_url, churned.schema) == before
    warned = [r.getMessage() for r in caplog.records if "DEAD_ROWS_HIGH" in r.getMessage()]
    assert len(warned) == 1 and f"VACUUM (ANALYZE) {churned.schema}.jobs" in warned[0]
    await chore.turn()  # a standing warning is not repeated every minute
    assert len([r for r in caplog.records if "DEAD_ROWS_HIGH" in r.getMessage()]) == 1


def test_the_switch(memory_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKHORSE_VACUUM", raising=False)
    assert Scheduler(memory_app).vacuum is True
    assert Scheduler(memory_app, vacuum=False).vacuum is False
    monkeypatch.setenv("WORKHORSE_VACUUM", "off")
    assert Scheduler(memory_app).vacuum is False
    assert Scheduler(memory_app, vacuum=True).vacuum is True  # the argument wins
    monkeypatch.setenv("WORKHORSE_VACUUM", " ON ")
    assert vacuum_setting() is True


@pytest.mark.parametrize(("env", "value"), [("sometimes", None), ("", "off")])
def test_a_bad_setting_is_refused(memory_app: App, monkeypatch: pytest.MonkeyPatch, env: str, value: object) -> None:
    monkeypatch.setenv("WORKHORSE_VACUUM", env)
    with pytest.raises(ConfigurationError) as refused:
        Scheduler(memory_app, vacuum=value)  # type: ignore[arg-type]
    assert refused.value.code == "VACUUM_SETTING_INVALID"
    assert "WORKHORSE_VACUUM" in refused.value.cause + refused.value.fix


async def test_the_leader_vacuums_after_its_round(database_url: str, schema: str) -> None:
    """A running scheduler that leads takes its first turn after its first round."""
    app = App(database_url, schema=schema)
    await app.migrate()
    declare(app)

    @app.task(name="health.tick", every="1h", tenant="none")
    async def tick(ctx: object, payload: object) -> None:
        return None

    churned_at = await jobs_with_dead_rows(app, jobs=2000, updates=6)  # 12,000 dead: past 10,000 + 5% of 2,000
    pinned = pinned_before(database_url, churned_at)
    scheduler = Scheduler(app, handle_signals=False, vacuum=True)
    run = asyncio.create_task(scheduler.run())
    deadline = time.monotonic() + 20
    while not scheduler._vacuum.vacuumed and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await scheduler.stop()
    await run
    await app.close()
    assert scheduler._vacuum.vacuumed == ["jobs"] and vacuum_count(database_url, schema) == 1
    if not pinned:
        assert dead_rows(database_url, schema) < 1000


async def test_under_a_pinned_horizon_it_names_the_holder_and_does_not_vacuum_in_vain(
    database_url: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows that died after a reader's snapshot outlive the vacuum: the duty says who holds them,
    and does not vacuum the table again each minute for nothing."""
    caplog.set_level(logging.INFO, logger="workhorse.scheduler")
    app = App(database_url, schema=schema)
    await app.migrate()
    declare(app)
    await jobs_with_dead_rows(app, jobs=2000, updates=0)
    with psycopg.connect(database_url) as reader:
        reader.execute("set transaction isolation level repeatable read")
        reader.execute("select count(*) from pg_class")
        churned_at = await jobs_with_dead_rows(app, jobs=0, updates=2)  # 4,000 rows die after the snapshot
        await asyncio.sleep(1.1)
        chore = duty(app, base=1000, recent=0.0, pinned_after=1.0)
        assert await chore.turn() == "jobs"
        assert dead_rows(database_url, schema) >= 4000  # the vacuum could remove none of them
        named = [r.getMessage() for r in caplog.records if "VACUUM_HORIZON_PINNED" in r.getMessage()]
        assert any(f"pid {reader.info.backend_pid}" in line for line in named), named
        assert await chore.turn() is None  # as many again must die before it tries again
        reader.rollback()
    chore.pinned_after = 300.0  # (so another test's transaction of a second does not count here)
    pinned = pinned_before(database_url, churned_at)
    assert await chore.turn() == "jobs"  # nothing pins the horizon now: the same rows go
    if not pinned:
        assert dead_rows(database_url, schema) < 100
    await app.close()
