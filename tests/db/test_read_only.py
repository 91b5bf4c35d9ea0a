"""A failover that leaves pooled connections on a node that cannot write (FAULTS.md, C16): the
read-only error is treated as a lost connection, the pool is rebuilt, and work resumes as soon as
new connections can write. Simulated in a database of the test's own: its sessions opened while
``default_transaction_read_only`` is on keep it after the setting is reset, as sessions on a
demoted primary would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from workhorse import App, DatabaseError, JobContext
from workhorse.drivers.postgres import PostgresDriver

SCHEMA = "failover"


def _dbname(url: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])


async def _read_only(database_url: str, url: str, on: bool) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        change = "set default_transaction_read_only = on" if on else "reset default_transaction_read_only"
        await admin.execute(f"alter database {_dbname(url)} {change}")  # type: ignore[arg-type]


@pytest.fixture
async def stale_app(database_url: str, dedicated_database: str) -> AsyncIterator[App]:
    """An App whose pool (and hot connections) hold six sessions that cannot write, on a database
    whose new sessions can."""
    setup = App(dedicated_database, schema=SCHEMA)
    await setup.migrate()
    await setup.close()
    await _read_only(database_url, dedicated_database, True)
    app = App(driver=PostgresDriver(dedicated_database, schema=SCHEMA, role="stale", min_size=1, max_size=6))

    async def hold() -> None:
        assert isinstance(app.driver, PostgresDriver)
        async with app.driver.connection() as conn:
            await conn.execute("select pg_sleep(0.3)")

    await asyncio.gather(*(hold() for _ in range(6)))
    await _read_only(database_url, dedicated_database, False)
    try:
        yield app
    finally:
        assert isinstance(app.driver, PostgresDriver)
        await app.driver.close()


async def test_an_enqueue_on_a_read_only_session_fails_once_and_the_next_writes(stale_app: App) -> None:
    @stale_app.job(name="after.failover", tenant="none")
    async def job(ctx: JobContext, payload: object) -> None:
        return None

    with pytest.raises(DatabaseError) as failed:
        await job.enqueue({"n": 1})
    assert failed.value.code == "DATABASE_UNAVAILABLE"
    assert "read-only" in failed.value.cause
    ref = await job.enqueue({"n": 2})
    assert await stale_app.get_job(ref.id) is not None
