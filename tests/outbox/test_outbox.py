"""The transactional outbox on real PostgreSQL: a source database of its own (``dedicated_database``)
staging jobs for a queue in another database (``pg_app``'s schema). Each committed staged row
becomes exactly one job, a rolled-back one none."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import workhorse.outbox.queries as sql
from workhorse import App, ConfigurationError, DatabaseError, Outbox, PayloadError, SchemaError
from workhorse.ids import new_job_id
from workhorse.outbox.postgres import PostgresOutbox
from workhorse.outbox.relay import Relay
from workhorse.outbox.source import _job
from workhorse.types import NewJob


def declare(app: App) -> Any:
    @app.job(name="outbox.welcome", queue="emails", tenant=lambda p: p["org"])
    async def welcome(ctx: Any, payload: dict[str, Any]) -> None:
        return None

    return welcome


async def migrated(app: App, source: str) -> Outbox:
    outbox = Outbox(app)
    async with await psycopg.AsyncConnection.connect(source) as conn:
        assert await outbox.migrate(conn) == [1]
        assert await outbox.migrate(conn) == []  # again: harmless, nothing to do
    return outbox


def rows(source: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(source) as conn:
        return conn.execute(
            f"select id::text, published_at is not null, outcome, claims from {schema}.outbox order by id"  # type: ignore[arg-type]
        ).fetchall()


async def jobs(app: App) -> list[Any]:
    page = await app.list_jobs(limit=200)
    return list(page.jobs)


async def relay_once(app: App, source: str, **options: Any) -> Relay:
    relay = Relay(app, [source], handle_signals=False, **options)
    await asyncio.wait_for(relay.run(burst=True), 60)
    return relay


async def test_a_committed_stage_becomes_exactly_one_job_of_its_id(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        ref = await outbox.stage(conn, welcome, {"org": "o1", "to": "ada"}, key="welcome:ada")
        assert not ref.duplicate
        assert await pg_app.get_job(ref.id) is None  # not before the relay moved it
    relay = await relay_once(pg_app, dedicated_database)
    job = await pg_app.get_job(ref.id)
    assert job is not None and job.payload == {"org": "o1", "to": "ada"} and job.tenant == "o1"
    assert (job.queue, job.key, job.state, job.name) == ("emails", "welcome:ada", "ready", "outbox.welcome")
    assert rows(dedicated_database, pg_app.schema) == [(ref.id, True, "enqueued", 1)]  # kept as the audit trail
    assert relay.stats.to_dict()["enqueued"] == 1
    await relay_once(pg_app, dedicated_database)  # nothing pending: nothing moves again
    assert len(await jobs(pg_app)) == 1


async def test_a_rolled_back_stage_becomes_no_job(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        await conn.execute("create table orders (id int)")
        await conn.commit()
        await conn.execute("insert into orders values (1)")
        kept = await outbox.stage(conn, welcome, {"org": "o1"})
        await conn.commit()
        await conn.execute("insert into orders values (2)")
        await outbox.stage(conn, welcome, {"org": "o2"})
        await conn.rollback()
    await relay_once(pg_app, dedicated_database)
    assert [j.id for j in await jobs(pg_app)] == [kept.id]
    assert [r[0] for r in rows(dedicated_database, pg_app.schema)] == [kept.id]


async def test_sync_connections_stage_and_migrate(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = Outbox(pg_app)
    with psycopg.connect(dedicated_database) as conn:
        assert outbox.migrate_sync(conn) == [1]
    with psycopg.connect(dedicated_database) as conn:
        one = outbox.stage_sync(conn, welcome, {"org": "o1"})
        many = outbox.stage_many_sync(conn, welcome, [{"org": "o2"}, {"org": "o3"}], keys=["a", None])
        awaited = await outbox.stage(conn, welcome, {"org": "o4"})  # a sync connection handed to the async call
    await relay_once(pg_app, dedicated_database)
    found = {j.id: j.tenant for j in await jobs(pg_app)}
    assert found == {one.id: "o1", many[0].id: "o2", many[1].id: "o3", awaited.id: "o4"}


async def test_sqlalchemy_sessions_stage_in_their_own_transaction(pg_app: App, dedicated_database: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    from sqlalchemy.orm import Session

    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dedicated_database))
    async_engine = create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(dedicated_database)
    )
    try:
        with Session(engine) as session:
            dropped = outbox.stage_sync(session, welcome, {"org": "gone"})
            session.rollback()
        with Session(engine) as session, session.begin():
            session.execute(text("select 1"))
            kept = outbox.stage_sync(session, welcome, {"org": "o1"})
        async with AsyncSession(async_engine) as asession, asession.begin():
            kept_async = await outbox.stage(asession, welcome, {"org": "o2"})
    finally:
        engine.dispose()
        await async_engine.dispose()
    await relay_once(pg_app, dedicated_database)
    found = {j.id for j in await jobs(pg_app)}
    assert found == {kept.id, kept_async.id} and dropped.id not in found


async def test_stage_many_is_one_batch_and_the_relay_moves_it_in_batches(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        refs = await outbox.stage_many(conn, welcome, [{"org": f"o{i}"} for i in range(120)])
    relay = await relay_once(pg_app, dedicated_database, batch=50)
    assert {j.id for j in await jobs(pg_app)} == {r.id for r in refs}
    assert relay.stats.to_dict()["batches"] == 3


async def test_refusals_at_stage_write_nothing(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        with pytest.raises(PayloadError) as bad:
            await outbox.stage(conn, welcome, {"org": "o1", "x": float("nan")})
        assert bad.value.code == "PAYLOAD_INVALID" and "$.x" in bad.value.cause
        with pytest.raises(ConfigurationError) as tenant:
            await outbox.stage(conn, welcome, {"no_org": 1})
        assert tenant.value.code == "TENANT_INVALID"
        with pytest.raises(ConfigurationError):
            await outbox.stage(conn, welcome, {"org": "o1"}, key="k" * 201)
        with pytest.raises(ConfigurationError):
            await outbox.stage(conn, welcome, {"org": "o1"}, delay="5m", run_at=datetime.now(UTC))
        with pytest.raises(PayloadError):  # one bad payload refuses the whole batch
            await outbox.stage_many(conn, welcome, [{"org": "o1"}, {"org": "o2", "at": datetime.now(UTC)}])
        with pytest.raises(ConfigurationError) as conn_error:
            await outbox.stage("not a connection", welcome, {"org": "o1"})
        assert conn_error.value.code == "CONN_INVALID"
        with pytest.raises(ConfigurationError):
            await outbox.stage(conn, lambda c, p: None, {"org": "o1"})  # type: ignore[arg-type]
        await conn.commit()
    assert rows(dedicated_database, pg_app.schema) == []


async def test_a_source_without_the_staging_table_is_refused_with_its_fix(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = Outbox(pg_app)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        with pytest.raises(SchemaError) as staged:
            await outbox.stage(conn, welcome, {"org": "o1"})
    assert staged.value.code == "OUTBOX_NOT_MIGRATED" and "workhorse outbox migrate" in staged.value.fix
    with pytest.raises(SchemaError) as relayed:
        await relay_once(pg_app, dedicated_database)
    assert relayed.value.code == "OUTBOX_NOT_MIGRATED"


async def test_a_key_held_by_a_live_job_is_honoured_as_enqueue_honours_it(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    holder = await welcome.enqueue({"org": "o1"}, key="k1")
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        staged = await outbox.stage(conn, welcome, {"org": "o1"}, key="k1")
        other_tenant = await outbox.stage(conn, welcome, {"org": "o2"}, key="k1")
        twins = await outbox.stage_many(conn, welcome, [{"org": "o3"}, {"org": "o3"}], keys=["k3", "k3"])
    relay = await relay_once(pg_app, dedicated_database)
    ids = {j.id for j in await jobs(pg_app)}
    assert ids == {holder.id, other_tenant.id, twins[0].id}
    outcomes = {r[0]: r[2] for r in rows(dedicated_database, pg_app.schema)}
    assert outcomes == {staged.id: "duplicate", other_tenant.id: "enqueued", twins[0].id: "enqueued",
                        twins[1].id: "duplicate"}  # fmt: skip
    assert relay.stats.to_dict()["duplicate"] == 2


async def test_a_batch_moved_again_after_a_crash_inserts_nothing_twice(pg_app: App, dedicated_database: str) -> None:
    """A relay that died after the queue committed and before the source was marked: the rows come
    back after the lease, and the next relay finds their ids taken."""
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        refs = await outbox.stage_many(conn, welcome, [{"org": "o1"}, {"org": "o2"}], keys=["a", None])
    with psycopg.connect(dedicated_database, autocommit=True) as conn:
        claimed = conn.execute(outbox.q(sql.CLAIM), {"batch": 10, "relay_id": "dead-relay", "lease": 0.2}).fetchall()
    cols = ["id", "name", "queue", "tenant", "payload", "idempotency_key", "priority", "max_attempts",
            "dead_letter", "run_at", "delay", "flow_key", "traceparent"]  # fmt: skip
    moved = [_job(dict(zip(cols, row, strict=True))) for row in claimed]
    assert await pg_app.driver.enqueue_staged(moved) == ["enqueued", "enqueued"]  # type: ignore[attr-defined]
    assert await relay_once(pg_app, dedicated_database, lease="30s")  # the lease still holds: nothing taken
    assert all(not r[1] for r in rows(dedicated_database, pg_app.schema))
    await asyncio.sleep(0.3)  # the dead relay's lease lapses
    relay = await relay_once(pg_app, dedicated_database)
    assert relay.stats.to_dict()["present"] == 2 and relay.stats.to_dict()["enqueued"] == 0
    assert sorted(j.id for j in await jobs(pg_app)) == sorted(r.id for r in refs)
    assert [(r[1], r[2], r[3]) for r in rows(dedicated_database, pg_app.schema)] == [(True, "present", 2)] * 2


async def test_two_relays_at_once_never_move_one_row_twice(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        refs = await outbox.stage_many(conn, welcome, [{"org": f"o{i % 7}"} for i in range(3000)])
    first = Relay(pg_app, [dedicated_database], handle_signals=False, batch=50)
    second = Relay(pg_app, [dedicated_database], handle_signals=False, batch=50)
    await asyncio.wait_for(asyncio.gather(first.run(burst=True), second.run(burst=True)), 120)
    a, b = first.stats.to_dict(), second.stats.to_dict()
    assert a["claimed"] + b["claimed"] == 3000, (a, b)  # each row claimed once: no lease lapsed meanwhile
    assert a["enqueued"] + b["enqueued"] == 3000 and a["present"] + b["present"] == 0
    assert a["claimed"] > 0 and b["claimed"] > 0  # both took part
    with psycopg.connect(pg_app.database_url) as conn:
        count = conn.execute(f"select count(*), count(distinct id) from {pg_app.schema}.jobs").fetchone()  # type: ignore[arg-type]
    assert count == (3000, 3000)
    assert {r[0] for r in rows(dedicated_database, pg_app.schema)} == {r.id for r in refs}


async def test_a_delay_counts_from_staging_and_run_at_is_kept(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    at = datetime.now(UTC) + timedelta(days=2)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        later = await outbox.stage(conn, welcome, {"org": "o1"}, delay="1h", priority=7)
        fixed = await outbox.stage(conn, welcome, {"org": "o1"}, run_at=at)
    await relay_once(pg_app, dedicated_database)
    job = await pg_app.get_job(later.id)
    assert job is not None and job.state == "delayed" and job.priority == 7
    assert timedelta(minutes=59) < job.run_at - datetime.now(UTC) <= timedelta(hours=1)
    pinned = await pg_app.get_job(fixed.id)
    assert pinned is not None and abs((pinned.run_at - at).total_seconds()) < 0.001


async def test_retention_removes_old_published_rows_never_a_pending_one(pg_app: App, dedicated_database: str) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        await outbox.stage_many(conn, welcome, [{"org": "o1"}] * 3)
    await relay_once(pg_app, dedicated_database)
    with psycopg.connect(dedicated_database, autocommit=True) as conn:
        conn.execute(f"update {pg_app.schema}.outbox set published_at = now() - interval '8 days'")  # type: ignore[arg-type]
        pending = new_job_id()
        conn.execute(
            f"insert into {pg_app.schema}.outbox (id, name, queue, payload, priority, max_attempts, dead_letter, "  # type: ignore[arg-type]
            "staged_at, lease_expires_at) values (%s, 'outbox.welcome', 'emails', '{}', 0, 1, true, "
            "now() - interval '30 days', now() + interval '1 hour')",
            (pending,),
        )
    relay = await relay_once(pg_app, dedicated_database)  # the default retention, 7 days
    assert relay.stats.to_dict()["purged"] == 3
    assert [r[0] for r in rows(dedicated_database, pg_app.schema)] == [pending]


async def test_relay_options_are_checked(pg_app: App) -> None:
    with pytest.raises(ConfigurationError):
        Relay(pg_app, [])
    with pytest.raises(ConfigurationError):
        Relay(pg_app, "postgresql://x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Relay(pg_app, ["a", "a"])
    with pytest.raises(ConfigurationError):
        Relay(pg_app, ["a"], batch=0)
    with pytest.raises(ConfigurationError):
        Relay(pg_app, ["a"], lease="soon")


async def test_enqueue_staged_answers_each_outcome_on_both_drivers(app: App) -> None:
    """The driver role the relay uses, parity: inserted, its id already a job, its key held."""
    welcome = declare(app)
    holder = await welcome.enqueue({"org": "o1"}, key="k")
    fresh: NewJob = welcome.build({"org": "o1"})
    keyed: NewJob = welcome.build({"org": "o1"}, key="k")
    driver: Any = app.driver
    assert await driver.enqueue_staged([fresh, keyed]) == ["enqueued", "duplicate"]
    assert await driver.enqueue_staged([fresh]) == ["present"]
    ids = {j.id for j in (await app.list_jobs(limit=10)).jobs}
    assert ids == {holder.id, fresh.id}


async def test_a_batch_the_queue_refuses_is_handed_back_and_moved_later(
    pg_app: App, dedicated_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue down for two batches (its enqueue refuses twice; the source is real): the rows are
    released at once, not left to their lease, and then moved exactly once."""
    refusals = [2]
    real = PostgresOutbox.enqueue_staged

    async def flaky(self: PostgresOutbox, jobs: Any) -> list[str]:
        if refusals[0]:
            refusals[0] -= 1
            raise DatabaseError(code="DATABASE_UNAVAILABLE", cause="the queue is down", fix="wait")
        return await real(self, jobs)

    monkeypatch.setattr(PostgresOutbox, "enqueue_staged", flaky)
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        refs = await outbox.stage_many(conn, welcome, [{"org": "o1"}, {"org": "o2"}])
    relay = await relay_once(pg_app, dedicated_database, lease="1h")  # a lease that never lapses in the test
    stats = relay.stats.to_dict()
    assert (stats["failures"], stats["enqueued"]) == (2, 2)
    assert sorted(j.id for j in await jobs(pg_app)) == sorted(r.id for r in refs)
    assert [r[3] for r in rows(dedicated_database, pg_app.schema)] == [3, 3]  # claimed three times, moved once


def claim_as_a_dead_relay(outbox: Outbox, source: str, lease: float) -> list[NewJob]:
    """What a relay that dies after the queue's commit leaves: rows claimed (leased), not marked."""
    with psycopg.connect(source, autocommit=True) as conn:
        claimed = conn.execute(outbox.q(sql.CLAIM), {"batch": 10, "relay_id": "dead-relay", "lease": lease}).fetchall()
    cols = ["id", "name", "queue", "tenant", "payload", "idempotency_key", "priority", "max_attempts",
            "dead_letter", "run_at", "delay", "flow_key", "traceparent"]  # fmt: skip
    return [_job(dict(zip(cols, row, strict=True))) for row in claimed]


async def test_a_row_moved_again_after_its_job_is_gone_runs_no_second_time(
    pg_app: App, dedicated_database: str
) -> None:
    """The relay died before marking; the job ran, finished and was removed (retention, an operator)
    before the lease lapsed: the next relay finds the queue's tombstone, not the job, and inserts
    nothing (`present`). Without the tombstone the row became a second job of the same id."""
    ran: list[str] = []

    @pg_app.job(name="outbox.once", queue="emails", tenant="none")
    async def once(ctx: Any, payload: dict[str, Any]) -> None:
        ran.append(ctx.id)

    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        ref = await outbox.stage(conn, once, {"n": 1})
        gone = await outbox.stage(conn, once, {"n": 2})
    moved = claim_as_a_dead_relay(outbox, dedicated_database, 0.3)
    assert await pg_app.driver.enqueue_staged(moved) == ["enqueued", "enqueued"]  # type: ignore[attr-defined]
    await pg_app.worker(concurrency=1).run(burst=True)
    assert sorted(ran) == sorted([ref.id, gone.id])
    await pg_app.admin.remove(ref.id)  # an operator
    with psycopg.connect(pg_app.database_url, autocommit=True) as conn:
        conn.execute(f"delete from {pg_app.schema}.jobs where id = %s", (gone.id,))  # type: ignore[arg-type]  # retention
    assert await jobs(pg_app) == []
    await asyncio.sleep(0.4)  # the dead relay's lease lapses
    relay = await relay_once(pg_app, dedicated_database)
    assert relay.stats.to_dict()["present"] == 2 and relay.stats.to_dict()["enqueued"] == 0
    assert await jobs(pg_app) == []
    await pg_app.worker(concurrency=1).run(burst=True)
    assert len(ran) == 2  # each body once
    assert [(r[1], r[2]) for r in rows(dedicated_database, pg_app.schema)] == [(True, "present")] * 2


async def test_two_relays_moving_one_row_at_once_answer_enqueued_and_present(
    pg_app: App, dedicated_database: str
) -> None:
    """A lapsed lease: two relays move one row at the same moment. They serialise on the tombstone;
    the second sees the first's commit and answers `present` (not `duplicate`), one job."""
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        await outbox.stage(conn, welcome, {"org": "o1"}, key="k")
    moved = claim_as_a_dead_relay(outbox, dedicated_database, 30)
    driver: Any = pg_app.driver
    answers = await asyncio.gather(*(driver.enqueue_staged(moved) for _ in range(4)))
    assert sorted(a[0] for a in answers) == ["enqueued", "present", "present", "present"]
    assert [j.id for j in await jobs(pg_app)] == [moved[0].id]


async def test_the_tombstone_purge_removes_only_old_ones(app: App) -> None:
    welcome = declare(app)
    driver: Any = app.driver
    old, young = welcome.build({"org": "o1"}), welcome.build({"org": "o2"})
    assert await driver.enqueue_staged([old, young]) == ["enqueued", "enqueued"]
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute(
            f"update {app.schema}.outbox_received set received_at = now() - interval '8 days' where id = %s",  # type: ignore[arg-type]
            (old.id,),
        )
    assert await driver.purge_received(7 * 86400.0, 500) == 1
    assert await driver.purge_received(7 * 86400.0, 500) == 0
    await app.admin.remove((await app.list_jobs(limit=10)).jobs[0].id)
    await app.admin.remove((await app.list_jobs(limit=10)).jobs[0].id)
    # the young tombstone still holds; the purged one no longer does (its row is long published)
    assert await driver.enqueue_staged([young, old]) == ["present", "enqueued"]


async def test_the_relay_purges_old_tombstones_keeping_them_at_least_seven_days(
    pg_app: App, dedicated_database: str
) -> None:
    welcome = declare(pg_app)
    outbox = await migrated(pg_app, dedicated_database)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        refs = await outbox.stage_many(conn, welcome, [{"org": "o1"}] * 3)
    await relay_once(pg_app, dedicated_database)
    with psycopg.connect(pg_app.database_url, autocommit=True) as conn:
        for ref, age in zip(refs, ["2 days", "8 days", "40 days"], strict=True):
            conn.execute(
                f"update {pg_app.schema}.outbox_received set received_at = now() - %s::interval where id = %s",  # type: ignore[arg-type]
                (age, ref.id),
            )
    relay = await relay_once(pg_app, dedicated_database, retention="1d")  # tombstones: 7 days at the least
    assert relay.received_age == 7 * 86400.0 and relay.stats.to_dict()["received_purged"] == 2
    relay = await relay_once(pg_app, dedicated_database, retention="30d")
    assert relay.stats.to_dict()["received_purged"] == 0
    with psycopg.connect(pg_app.database_url) as conn:
        kept = conn.execute(f"select id::text from {pg_app.schema}.outbox_received").fetchall()  # type: ignore[arg-type]
    assert kept == [(refs[0].id,)]
    assert Relay(pg_app, ["x"], retention=None).received_age is None


async def test_the_relay_refuses_the_memory_driver() -> None:
    relay = Relay(App(driver="memory"), ["postgresql://unused@127.0.0.1:1/none"], handle_signals=False)
    with pytest.raises(ConfigurationError) as refused:
        await relay.run(burst=True)
    assert refused.value.code == "POSTGRES_ONLY" and "outbox" in refused.value.cause
