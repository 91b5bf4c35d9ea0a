"""The single enqueue's wire statement (drivers/_wire.py): prepared once per connection under a
fixed name, prepared again when the server forgot it, and failing with the same errors as every
other statement. And the driver's hot connections: a dead one fails one call, close returns them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from workhorse import App, DatabaseError, JobContext, SchemaError
from workhorse.drivers.postgres import PostgresDriver


async def wire_app(database_url: str, schema: str, *, role: str = "app", max_size: int = 1) -> tuple[App, Any]:
    """A migrated app on its own driver (one pooled connection unless told, so the calls land on
    one server session) with one job declared. The app does not own a driver it was handed: each
    test closes it (``close``)."""
    app = App(driver=PostgresDriver(database_url, schema=schema, role=role, min_size=1, max_size=max_size))
    await app.migrate()

    @app.job(name="wire.task", tenant="none")
    async def task(ctx: JobContext, payload: object) -> None:
        return None

    return app, task


async def close(app: App) -> None:
    assert isinstance(app.driver, PostgresDriver)
    await app.driver.close()


async def test_a_session_that_forgot_the_statement_prepares_it_again(database_url: str, schema: str) -> None:
    app, task = await wire_app(database_url, schema)

    try:
        first = await task.enqueue({"n": 1})
        assert isinstance(app.driver, PostgresDriver)
        async with app.driver.connection() as conn:
            cur = await conn.execute("select name from pg_prepared_statements where name = 'workhorse_insert_ready'")
            assert await cur.fetchall() == [{"name": "workhorse_insert_ready"}]
            await conn.execute("deallocate all")  # what a pooler's reset (DISCARD ALL) does
        second = await task.enqueue({"n": 2})
        jobs = {j.id: j for j in (await app.list_jobs()).jobs}
        assert jobs[first.id].payload == {"n": 1} and jobs[second.id].payload == {"n": 2}
        assert jobs[second.id].state == "ready" and jobs[second.id].name == "wire.task"
    finally:
        await close(app)


async def test_a_missing_table_is_a_schema_error(database_url: str, schema: str) -> None:
    app, task = await wire_app(database_url, schema)

    try:
        await task.enqueue(None)  # prepared on this session
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"drop schema {schema} cascade")  # type: ignore[arg-type]
        with pytest.raises(SchemaError) as refused:
            await task.enqueue(None)
        assert refused.value.fix.startswith("workhorse migrate")
        await app.migrate()
        ref = await task.enqueue(None)  # the same session, after the refusal: still usable
        assert (await app.get_job(ref.id)) is not None
    finally:
        await close(app)


async def test_a_cancelled_enqueue_leaves_the_pool_usable(database_url: str, schema: str) -> None:
    app, task = await wire_app(database_url, schema)

    try:
        with psycopg.connect(database_url, autocommit=True) as locker, locker.transaction():
            locker.execute(f"lock table {schema}.jobs in exclusive mode")  # type: ignore[arg-type]
            blocked = asyncio.create_task(task.enqueue({"n": 1}))
            await asyncio.sleep(0.3)
            assert not blocked.done()
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
        ref = await asyncio.wait_for(task.enqueue({"n": 2}), timeout=10)
        jobs = (await app.list_jobs()).jobs
        assert [j.id for j in jobs] == [ref.id]  # the cancelled insert never landed
    finally:
        await close(app)


async def _backends(database_url: str, application_name: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        cur = await admin.execute(
            "select pid from pg_stat_activity where application_name = %s order by pid", (application_name,)
        )
        return [row[0] for row in await cur.fetchall()]


async def test_a_hot_connection_killed_fails_one_call_and_the_next_reconnects(database_url: str, schema: str) -> None:
    """The driver keeps idle connections borrowed from its pool (HOT_CONNECTIONS); one that died
    meanwhile fails the call that finds it, goes back to the pool (which discards it), and the next
    call gets a fresh connection."""
    role = f"hot{uuid.uuid4().hex[:8]}"
    app, task = await wire_app(database_url, schema, role=role, max_size=2)

    try:
        await task.enqueue({"n": 1})
        killed = await _backends(database_url, f"workhorse:{role}")
        assert killed
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            for pid in killed:
                await admin.execute("select pg_terminate_backend(%s)", (pid,))
        failures: list[DatabaseError] = []
        for n in range(2, 2 + len(killed) + 1):  # each killed connection fails at most one call
            try:
                await task.enqueue({"n": n})
                break
            except DatabaseError as error:
                failures.append(error)
        assert 1 <= len(failures) <= len(killed)
        assert {f.code for f in failures} == {"DATABASE_UNAVAILABLE"}
        ref = await task.enqueue({"n": 100})
        assert await app.get_job(ref.id) is not None
        assert not set(await _backends(database_url, f"workhorse:{role}")) & set(killed)
    finally:
        await close(app)


async def test_close_returns_the_hot_connections(database_url: str, schema: str) -> None:
    role = f"hot{uuid.uuid4().hex[:8]}"
    app, task = await wire_app(database_url, schema, role=role, max_size=4)

    await asyncio.gather(*(task.enqueue({"n": n}) for n in range(8)))  # several connections at once
    assert await _backends(database_url, f"workhorse:{role}")
    assert isinstance(app.driver, PostgresDriver)
    hot = list(app.driver._hot)
    assert hot  # the idle connections the driver kept borrowed
    await close(app)
    assert all(conn.closed for conn in hot)  # closed with the pool, not left to the garbage collector
    for _ in range(50):  # the server notices a closed client a moment later
        if not await _backends(database_url, f"workhorse:{role}"):
            break
        await asyncio.sleep(0.05)
    assert await _backends(database_url, f"workhorse:{role}") == []


async def test_callers_of_a_one_connection_pool_never_starve(database_url: str, schema: str) -> None:
    """A worker role's driver has ONE connection and several loops on it (settle, progress, hand
    back): the connection goes back to the pool, not the hot stack, while someone waits there."""
    app, task = await wire_app(database_url, schema)

    try:
        refs = await asyncio.wait_for(asyncio.gather(*(task.enqueue({"n": n}) for n in range(20))), timeout=5)
        assert len({r.id for r in refs}) == 20
    finally:
        await close(app)


async def test_when_every_session_is_terminated_one_call_fails_and_the_next_works(
    database_url: str, schema: str
) -> None:
    """An operator terminates every session (or the server restarts) while the pool holds several
    idle connections: the call that meets the first dead one fails, and the pool is swept then, so
    the next call (a retry, a step's write) gets a live connection, not the next dead one. Before
    the sweep each dead connection failed a call of its own: six in a row here."""
    role = f"all{uuid.uuid4().hex[:8]}"
    app, task = await wire_app(database_url, schema, role=role, max_size=6)

    async def hold() -> None:
        assert isinstance(app.driver, PostgresDriver)
        async with app.driver.connection() as conn:
            await conn.execute("select pg_sleep(0.2)")

    try:
        await asyncio.gather(*(hold() for _ in range(6)))
        killed = await _backends(database_url, f"workhorse:{role}")
        assert len(killed) >= 4
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            for pid in killed:
                await admin.execute("select pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DatabaseError) as failed:
            await task.enqueue({"n": 1})
        assert failed.value.code == "DATABASE_UNAVAILABLE"
        ref = await task.enqueue({"n": 2})
        assert await app.get_job(ref.id) is not None
    finally:
        await close(app)


async def test_when_every_session_is_terminated_one_sync_enqueue_fails_and_the_next_works(
    database_url: str, schema: str
) -> None:
    """The same for enqueue_sync's pool of blocking connections."""
    role = f"syn{uuid.uuid4().hex[:8]}"
    app, task = await wire_app(database_url, schema, role=role, max_size=6)

    def hold() -> None:
        assert isinstance(app.driver, PostgresDriver)
        with app.driver.sync_connection() as conn:
            conn.execute("select pg_sleep(0.5)")

    try:
        await asyncio.gather(*(asyncio.to_thread(hold) for _ in range(6)))
        killed = await _backends(database_url, f"workhorse:{role}")
        assert len(killed) >= 2  # the blocking pool grows one connection at a time
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            for pid in killed:
                await admin.execute("select pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DatabaseError) as failed:
            await asyncio.to_thread(task.enqueue_sync, {"n": 1})
        assert failed.value.code == "DATABASE_UNAVAILABLE"
        ref = await asyncio.to_thread(task.enqueue_sync, {"n": 2})
        assert await app.get_job(ref.id) is not None
    finally:
        await close(app)
