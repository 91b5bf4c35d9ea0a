"""The operator surface's statements on a real server: plans at scale (the list page, the id
prefix, the hot claim and settle statements under generic plans), counters that agree with the
rows, a rollup that never counts twice, settles that never deadlock, and the wakes."""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString, cast

import psycopg
import pytest

from workhorse import App, JobContext, Retry, TerminalError
from workhorse._db.queries import admin as admin_sql
from workhorse._db.queries import jobs as sql
from workhorse.drivers.postgres import PostgresDriver
from workhorse.drivers.postgres_core import jobs_channel
from workhorse.ids import SHORT_ID_PERIODS, short_id
from workhorse.types import BulkFilter, Settlement

ROWS = 200_000


def q(schema: str, statement: str) -> LiteralString:
    return cast(LiteralString, statement.replace("{schema}", schema))


def fill(conn: psycopg.Connection[Any], schema: str, rows: int) -> None:
    """``rows`` jobs, one a millisecond apart, mostly done, in two queues; then ANALYZE."""
    conn.execute(
        q(
            schema,
            """
            insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, run_at, created_at)
            select gen_random_uuid(), 'task', case when g %% 7 = 0 then 'other' else 'default' end,
                   case when g %% 10 = 0 then 'ready' when g %% 10 = 1 then 'dead' else 'done' end,
                   '{}'::jsonb, 3, now(), now() - g * interval '1 millisecond'
            from generate_series(1, %(rows)s) as g
            """,
        ),
        {"rows": rows},
    )
    conn.execute(q(schema, "analyze {schema}.jobs"))


def explain(
    conn: psycopg.Connection[Any], schema: str, statement: str, params: dict[str, Any], *, generic: bool
) -> str:
    """The plan ``statement`` runs with, prepared as a driver would run it: a custom plan (the
    ``app`` role) or a generic one (worker roles run with plan_cache_mode=force_generic_plan)."""
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", positional, statement.replace("{schema}", schema))
    mode = "force_generic_plan" if generic else "force_custom_plan"
    conn.execute(q(schema, f"set plan_cache_mode = {mode}"))
    conn.execute(q(schema, f"prepare explained as {text}"))
    try:
        literals = ", ".join(psycopg.sql.Literal(params[n]).as_string(conn) for n in names)
        rows = conn.execute(q(schema, f"explain (costs off) execute explained({literals})")).fetchall()
    finally:
        conn.execute("deallocate explained")
        conn.execute("reset plan_cache_mode")
    return "\n".join(r[0] for r in rows)


def connect(database_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(database_url, autocommit=True, prepare_threshold=None, options="-c TimeZone=UTC")


# -- every statement is valid SQL -----------------------------------------------------------------------


def admin_statements() -> list[tuple[str, str]]:
    found = [
        (name, value)
        for name, value in vars(admin_sql).items()
        if name.isupper() and isinstance(value, str) and re.search(r"\b(select|update|insert|delete)\b", value)
    ]
    every = list(admin_sql.LIST_FILTERS)
    for backwards in (False, True):
        cursor = "before" if backwards else "after"
        shapes = [[], [cursor], [f for f in every if f not in ("after", "before")] + [cursor]]
        shapes += [[f] for f in every if f not in ("after", "before")]
        for shape in shapes:
            found.append((f"list_page({'+'.join(shape)}, {cursor})", admin_sql.list_page(shape, backwards=backwards)))
        for searches in (["payload"], ["error"], list(admin_sql.SEARCH_FILTERS)):
            for shape in ([], [cursor], [f for f in every if f not in ("after", "before")] + [cursor]):
                text = admin_sql.search_page(shape, searches, backwards=backwards)
                found.append((f"search_page({'+'.join(shape)}; {'+'.join(searches)}, {cursor})", text))
    return found


@pytest.mark.parametrize(("name", "statement"), admin_statements(), ids=[n for n, _ in admin_statements()])
async def test_every_admin_statement_prepares(pg_app: App, database_url: str, name: str, statement: str) -> None:
    """Parsed, planned and type-checked by the server (PREPARE, never executed); the jobs,
    steps and scheduler statements have the same check in test_schema."""
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", positional, statement.replace("{schema}", pg_app.schema))
    with connect(database_url) as conn:
        conn.execute(q(pg_app.schema, f"prepare checked as {text}"))
        conn.execute("deallocate checked")


# -- plans at scale -----------------------------------------------------------------------------------


async def test_the_list_page_is_a_primary_key_scan_at_scale(pg_app: App, database_url: str) -> None:
    schema = pg_app.schema
    with connect(database_url) as conn:
        fill(conn, schema, ROWS)
        row = conn.execute(
            q(schema, "select id::text from {schema}.jobs order by id desc offset %(n)s limit 1"),
            {"n": ROWS // 2},
        ).fetchone()
        assert row is not None
        middle: str = row[0]
        cases: list[tuple[list[str], dict[str, Any], bool]] = [
            ([], {}, False),
            (["after"], {"after": middle}, False),
            (["before"], {"before": middle}, True),
            (["queue"], {"queue": "other"}, False),
            (["state", "after"], {"state": "dead", "after": middle}, False),
            (["queue", "state", "before"], {"queue": "default", "state": "ready", "before": middle}, True),
        ]
        for filters, params, backwards in cases:
            statement = admin_sql.list_page(filters, backwards=backwards)
            for generic in (False, True):
                plan = explain(conn, schema, statement, {**params, "limit": 100}, generic=generic)
                scan = "Index Scan using jobs_pkey" if backwards else "Index Scan Backward using jobs_pkey"
                assert scan in plan, (filters, generic, plan)
                assert "Sort" not in plan and "Seq Scan" not in plan, (filters, generic, plan)
                if "after" in filters or "before" in filters:  # the cursor starts the scan: no row before it is read
                    assert "Index Cond: (id " in plan, (filters, generic, plan)
                    # A cursor is a position: no check that it names a job (a row may be gone).
                    assert "One-Time Filter" not in plan, (filters, generic, plan)

    # The driver reads the same pages both ways around the middle of the table, quickly.
    started = time.monotonic()
    older = await pg_app.admin.list(limit=50, after=middle)
    newer = await pg_app.admin.list(limit=50, before=older.prev)
    assert newer.jobs[-1].id == middle and len(newer.jobs) == 50
    assert (await pg_app.admin.list(limit=50, after=newer.next)).jobs == older.jobs
    assert time.monotonic() - started < 2.0


async def test_the_id_prefix_filter_uses_the_primary_key(pg_app: App, database_url: str) -> None:
    schema = pg_app.schema
    with connect(database_url) as conn:
        fill(conn, schema, ROWS)
        row = conn.execute(q(schema, "select id::text from {schema}.jobs offset 1234 limit 1")).fetchone()
    assert row is not None
    some: str = row[0]
    prefix = some.replace("-", "")[:12]
    low, high = prefix.ljust(32, "0"), prefix.ljust(32, "f")
    params = {
        "id_low": f"{low[:8]}-{low[8:12]}-{low[12:16]}-{low[16:20]}-{low[20:]}",
        "id_high": f"{high[:8]}-{high[8:12]}-{high[12:16]}-{high[16:20]}-{high[20:]}",
        "limit": 100,
    }
    with connect(database_url) as conn:
        plan = explain(conn, schema, admin_sql.list_page(["id_prefix"], backwards=False), params, generic=False)
    assert "jobs_pkey" in plan, plan
    assert "Index Cond: ((id >= " in plan, plan
    page = await pg_app.admin.list(id_prefix=prefix)
    assert [j.id for j in page.jobs] == [some]
    assert [j.id for j in (await pg_app.admin.list(id_prefix=some.upper())).jobs] == [some]


async def test_a_short_id_is_found_by_a_primary_key_range_a_period(pg_app: App, database_url: str) -> None:
    """Issue 29: a short id has no index of its own; its lookup probes one jobs_pkey range per
    4.7-hour period the table spans (here 200,000 jobs over a year: 1,880 periods)."""
    schema = pg_app.schema
    year_ms = 365 * 86_400_000
    with connect(database_url) as conn:
        conn.execute(
            q(
                schema,
                """
                insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, run_at)
                select (left(h, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4)
                        || '-' || right(h, 12))::uuid, 'task', 'default', 'done', '{}'::jsonb, 3, now()
                from generate_series(1, %(rows)s) as g,
                     lateral (select (extract(epoch from now()) * 1000)::bigint - g::bigint * %(step)s as ms) as t,
                     lateral (select lpad(to_hex(t.ms), 12, '0') || '7' || lpad(to_hex(g %% 4096), 3, '0') || '8'
                                     || substr(md5(g::text), 1, 15) as h) as made
                """,
            ),
            {"rows": ROWS, "step": year_ms // ROWS},
        )
        conn.execute(q(schema, "analyze {schema}.jobs"))
        row = conn.execute(q(schema, "select id::text from {schema}.jobs order by id offset 123456 limit 1")).fetchone()
        assert row is not None
        some: str = row[0]
        tail = short_id(some)
        params = {"low": tail[:6], "counter": tail[6:9], "rand": tail[9:], "periods": SHORT_ID_PERIODS, "limit": 6}
        for generic in (False, True):
            plan = explain(conn, schema, admin_sql.SHORT_ID_LOOKUP, params, generic=generic)
            assert "Seq Scan" not in plan, (generic, plan)
            # a range of the key a period, then a lookup a hit; never a walk of the whole key
            assert re.search(r"using jobs_pkey on jobs candidate\n\s+Index Cond: \(\(id >= ", plan), plan
            assert re.search(r"Index Scan using jobs_pkey on jobs j\n\s+Index Cond: \(id = ", plan), plan
    started = time.monotonic()
    assert await pg_app.admin.resolve(tail) == some
    assert time.monotonic() - started < 2.0  # generous: 1,880 short primary-key ranges, not 200,000 rows


async def test_the_hot_statements_plans_under_generic_plans(pg_app: App, database_url: str) -> None:
    """Worker roles run generic plans, planned once per connection: the settle must look its rows
    up by primary key whether it was planned while nothing ran or while many did (never a pass
    over every running row), and both claims must read jobs_due_idx, with the pause check cheap."""
    schema = pg_app.schema
    with connect(database_url) as conn:
        fill(conn, schema, ROWS)
        claim = {
            "queues": ["default"],
            "slots": [50],
            "names": ["task"],
            "worker_id": "w2",
            "visibility": 30.0,
            "channel": "unused",
        }
        for running in (0, 2_000):
            conn.execute(
                q(
                    schema,
                    """update {schema}.jobs set state = 'running', worker_id = 'w', claims = 1,
                           lease_expires_at = now() + interval '1 minute'
                       where id in (select id from {schema}.jobs where state = 'ready' limit %(n)s)""",
                ),
                {"n": running},
            )
            conn.execute(q(schema, "analyze {schema}.jobs"))
            ids = [str(uuid.uuid4()) for _ in range(20)]
            settle = explain(
                conn,
                schema,
                sql.SETTLE_MANY,
                {
                    "ids": ids,
                    "worker_ids": ["w"] * 20,
                    "claims": [1] * 20,
                    "outcomes": ["done"] * 20,
                    "results": ["1"] * 20,
                    "errors": [None] * 20,
                    "delays": [0.0] * 20,
                    "progresses": [None] * 20,
                    "reasons": [None] * 20,
                    "release": False,
                    "channel": "unused",
                    "settled_channel": "unused",
                },
                generic=True,
            )
            assert "Index Scan using jobs_pkey on jobs j" in settle, (running, settle)
            assert "jobs_running_lease_idx" not in settle and "Seq Scan on jobs" not in settle, (running, settle)
            assert "Conflict Arbiter Indexes: counters_pkey" in settle, settle
            for statement in (sql.CLAIM_DUE, sql.CLAIM):
                plan = explain(conn, schema, statement, claim, generic=True)
                assert "Index Scan using jobs_due_idx" in plan, (running, plan)
                assert "Seq Scan on jobs" not in plan, (running, plan)


# -- counters ---------------------------------------------------------------------------------------


async def test_counters_agree_with_the_rows_after_a_worker_drains_a_mix(pg_app: App, database_url: str) -> None:
    app = pg_app

    @app.job(name="ok", queue="q1", tenant="none")
    async def ok(ctx: JobContext, payload: int) -> int:
        return payload

    @app.job(name="flaky", queue="q1", tenant="none", retry=Retry(attempts=4, base=0, jitter=False))
    async def flaky(ctx: JobContext, payload: int) -> int:
        if ctx.attempt <= payload:
            raise ValueError(f"not yet {ctx.attempt}")
        return payload

    @app.job(name="doomed", queue="q1", tenant="none", retry=Retry(attempts=3, base=0, jitter=False))
    async def doomed(ctx: JobContext, payload: int) -> None:
        raise ValueError("never")

    @app.job(name="dropped", queue="q2", tenant="none", retry=Retry(attempts=2, base=0, dead_letter=False))
    async def dropped(ctx: JobContext, payload: int) -> None:
        raise ValueError("dropped")

    @app.job(name="terminal", queue="q2", tenant="none", retry=Retry(attempts=5, base=0))
    async def terminal(ctx: JobContext, payload: int) -> None:
        raise TerminalError("no point")

    @app.job(name="lost", queue="q3", tenant="none", retry=Retry(attempts=2, base=0))
    async def lost(ctx: JobContext, payload: int) -> int:
        return payload

    @app.job(name="buried", queue="q3", tenant="none", retry=Retry(attempts=1))
    async def buried(ctx: JobContext, payload: int) -> int:
        return payload

    for i in range(20):
        await ok.enqueue(i)
    for i in range(9):
        await flaky.enqueue(i % 3)
    for i in range(4):
        await doomed.enqueue(i)
        await dropped.enqueue(i)
        await terminal.enqueue(i)
    for i in range(3):
        await lost.enqueue(i)
        await buried.enqueue(i)
    # A worker that dies holding every q3 job: its leases lapse; the next claim takes back the
    # 'lost' ones (lapsed) and buries the 'buried' ones (on their final attempt: dead).
    gone = await app.driver.claim(worker_id="gone", wants={"q3": 10}, names=["lost", "buried"], visibility=0.1)
    assert len(gone.claimed) == 6
    await asyncio.sleep(0.3)
    await app.worker(queues=["q1", "q2", "q3"], concurrency=8).run(burst=True)

    with connect(database_url) as conn:
        rows = {
            (r[0], r[1]): r[2:]
            for r in conn.execute(
                q(
                    app.schema,
                    """select j.queue, j.name,
                              count(*) filter (where j.state = 'done'),
                              count(*) filter (where j.state = 'dead'),
                              count(*) filter (where j.state = 'failed'),
                              sum(j.attempt),
                              sum(jsonb_array_length(coalesce(j.errors, '[]'::jsonb))),
                              count(*) filter (where j.state not in ('done', 'dead', 'failed'))
                       from {schema}.jobs as j group by 1, 2""",
                )
            ).fetchall()
        }
        counters = {
            (r[0], r[1]): tuple(int(x) for x in r[2:])
            for r in conn.execute(
                q(
                    app.schema,
                    """select c.queue, c.name, sum(c.completed), sum(c.retried), sum(c.failed), sum(c.dead),
                              sum(c.lapsed)
                       from {schema}.counters as c group by 1, 2""",
                )
            ).fetchall()
        }
    assert set(counters) == set(rows)
    for key, (done, dead, failed, attempts, errors, unfinished) in rows.items():
        completed, retried, c_failed, c_dead, lapsed = counters[key]
        assert unfinished == 0, key
        assert (completed, c_dead, c_failed) == (done, dead, failed), key
        # Every claim spent an attempt, and every attempt ended in exactly one counted outcome.
        assert completed + retried + c_failed + c_dead + lapsed == attempts, key
        # Every attempt that failed left one entry in the errors history (a burial too), a lapse none.
        assert retried + c_failed + c_dead == errors, key
    assert counters[("q1", "flaky")] == (9, 9, 0, 0, 0)  # 0 + 1 + 2 retries, three times
    assert counters[("q1", "doomed")] == (0, 8, 0, 4, 0)
    assert counters[("q2", "dropped")] == (0, 4, 4, 0, 0)
    assert counters[("q2", "terminal")] == (0, 0, 0, 4, 0)
    assert counters[("q3", "lost")] == (3, 0, 0, 0, 3)
    assert counters[("q3", "buried")] == (0, 0, 0, 3, 0)
    snap = await app.admin.snapshot()
    assert {(c.queue, c.name): (c.completed, c.retried, c.failed, c.dead, c.lapsed) for c in snap.counters} == counters


# -- the rollup ---------------------------------------------------------------------------------------

Key = tuple[str, datetime, str, str]
VALUES = ("completed", "retried", "failed", "dead", "lapsed")


def truncate(at: datetime, unit: str) -> datetime:
    at = at.replace(second=0, microsecond=0)
    if unit in ("hour", "day"):
        at = at.replace(minute=0)
    if unit == "day":
        at = at.replace(hour=0)
    return at


def folded(table: dict[Key, list[int]], now: datetime) -> tuple[dict[Key, list[int]], int]:
    """What rollup_counters makes of ``table`` at ``now``: (the table, rows deleted)."""
    out = {k: list(v) for k, v in table.items()}
    deleted = 0
    for source, target, cutoff in (
        ("minute", "hour", truncate(now - timedelta(hours=2), "hour")),
        ("hour", "day", truncate(now - timedelta(days=2), "day")),
    ):
        for key in sorted(k for k in out if k[0] == source and k[1] < cutoff):
            values = out.pop(key)
            deleted += 1
            into = out.setdefault((target, truncate(key[1], target), key[2], key[3]), [0] * len(VALUES))
            for i, v in enumerate(values):
                into[i] += v
    return out, deleted


def seed(conn: psycopg.Connection[Any], schema: str, now: datetime, minutes: int) -> dict[Key, list[int]]:
    """Counter rows far from every cutoff: old minutes (3-5 hours, and 80 hours ago), recent ones,
    old and recent hours, and an existing day row an old hour folds into."""
    rng = random.Random(minutes)
    table: dict[Key, list[int]] = {}
    pairs = [("q1", "a"), ("q1", "b"), ("q2", "a")]

    def add(tier: str, bucket: datetime) -> None:
        for queue, name in pairs:
            table[(tier, bucket, queue, name)] = [rng.randrange(0, 50) for _ in VALUES]

    base = truncate(now, "minute")
    for m in range(minutes):
        add("minute", base - timedelta(hours=3, minutes=m % 120))  # 3 to 5 hours ago
    for m in range(0, 60, 7):
        add("minute", base - timedelta(hours=80, minutes=m))  # folds to an hour, then to a day
        add("minute", base - timedelta(minutes=m))  # this hour: stays
    hour = truncate(now, "hour")
    for h in (1, 30, 75, 76, 100):
        add("hour", hour - timedelta(hours=h))
    add("day", truncate(now - timedelta(days=4), "day"))
    add("day", truncate(now - timedelta(days=10), "day"))
    conn.execute(q(schema, "delete from {schema}.counters"))
    with conn.cursor() as cur:
        cur.executemany(
            q(
                schema,
                """insert into {schema}.counters (tier, bucket, queue, name, completed, retried, failed, dead, lapsed)
                   values (%s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            ),
            [(*key, *values) for key, values in table.items()],
        )
    return table


def read(conn: psycopg.Connection[Any], schema: str) -> dict[Key, list[int]]:
    rows = conn.execute(
        q(schema, "select tier, bucket, queue, name, completed, retried, failed, dead, lapsed from {schema}.counters")
    ).fetchall()
    return {(r[0], r[1], r[2], r[3]): [int(x) for x in r[4:]] for r in rows}


def totals(table: dict[Key, list[int]]) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for (_, _, queue, name), values in table.items():
        into = out.setdefault((queue, name), [0] * len(VALUES))
        for i, v in enumerate(values):
            into[i] += v
    return out


def database_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("select now()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now.astimezone(UTC)


async def test_rollup_folds_each_row_once_when_run_twice(pg_app: App, database_url: str) -> None:
    schema = pg_app.schema
    with connect(database_url) as conn:
        now = database_now(conn)
        table = seed(conn, schema, now, minutes=150)
    expected, deleted = folded(table, now)
    assert deleted > 0

    assert await pg_app.admin.rollup() == deleted
    with connect(database_url) as conn:
        after = read(conn, schema)
    assert after == expected
    assert totals(after) == totals(table)
    assert {k[0] for k in after if k[1] < truncate(now - timedelta(hours=2), "hour")} <= {"hour", "day"}

    assert await pg_app.admin.rollup() == 0  # nothing left to fold: no row counted twice
    with connect(database_url) as conn:
        assert read(conn, schema) == expected


async def test_rollup_from_concurrent_connections_never_counts_twice(pg_app: App, database_url: str) -> None:
    schema = pg_app.schema
    other = PostgresDriver(database_url, schema=schema, role="rollup")
    try:
        for round_ in range(3):
            with connect(database_url) as conn:
                now = database_now(conn)
                table = seed(conn, schema, now, minutes=1_500 + round_)
            expected, deleted = folded(table, now)
            answers = await asyncio.gather(
                *(d.rollup_counters() for _ in range(3) for d in (pg_app.driver, other)),
            )
            # A fold skips the rows another one holds right now (and an hour row still being
            # written), so the work is shared and one more pass finishes it. An old hour can be
            # written, folded into its day, and written again by a fold of more of its minutes:
            # more rows deleted than a single pass would, never a count added twice.
            answers.append(await pg_app.admin.rollup())
            assert sum(answers) >= deleted, answers
            with connect(database_url) as conn:
                after = read(conn, schema)
            assert totals(after) == totals(table)
            assert after == expected
    finally:
        await other.close()


# -- settles never deadlock ---------------------------------------------------------------------------


async def test_concurrent_settles_of_the_same_queue_and_names_do_not_deadlock(pg_app: App, database_url: str) -> None:
    app = pg_app
    names = ["a", "b", "c", "d"]
    queues = ["q1", "q2"]
    handles = []
    for queue in queues:
        for name in names:

            @app.job(name=f"{queue}-{name}", queue=queue, tenant="none")
            async def body(ctx: JobContext, payload: int) -> int:
                return payload

            handles.append(body)
    for handle in handles:
        await handle.enqueue_many(list(range(100)))
    every = [h.name for h in handles]
    drivers = [PostgresDriver(database_url, schema=app.schema, role=f"settle{i}") for i in range(2)]
    try:
        held: dict[str, list[Any]] = {}
        for worker, driver in zip(("w1", "w2"), drivers, strict=True):
            held[worker] = []
            while len(held[worker]) < 400:
                claim = await driver.claim(worker_id=worker, wants={"q1": 50, "q2": 50}, names=every, visibility=300)
                assert claim.claimed
                held[worker].extend(claim.claimed)
        rng = random.Random(6)
        outcomes = ("done", "retry", "dead", "failed")
        expected: Counter[tuple[str, str, str]] = Counter()

        def batches(worker: str) -> list[list[Settlement]]:
            jobs = list(held[worker])
            rng.shuffle(jobs)  # every batch names many (queue, name) pairs, in a different order
            out = []
            for start in range(0, len(jobs), 16):
                batch = []
                for c in jobs[start : start + 16]:
                    outcome = rng.choice(outcomes)
                    expected[(c.queue, c.name, outcome)] += 1
                    error = None if outcome == "done" else '{"type": "E", "message": "m", "traceback": null}'
                    batch.append(Settlement(c.id, worker, c.claims, outcome, result="1", error=error))
                out.append(batch)
            return out

        async def settle_all(driver: PostgresDriver, work: list[list[Settlement]]) -> list[bool]:
            landed: list[bool] = []
            for batch in work:
                landed.extend(await driver.settle(batch))
            return landed

        plans = {w: batches(w) for w in ("w1", "w2")}
        # Three streams a driver: six connections at once, each batch upserting up to 8 counter rows.
        streams = [
            settle_all(driver, plans[worker][i::3])
            for worker, driver in zip(("w1", "w2"), drivers, strict=True)
            for i in range(3)
        ]
        results = await asyncio.wait_for(asyncio.gather(*streams), timeout=60)
        assert all(all(r) for r in results)
    finally:
        for driver in drivers:
            await driver.close()
    snap = await app.admin.snapshot()
    column = {"done": "completed", "retry": "retried", "dead": "dead", "failed": "failed"}
    got = {
        (c.queue, c.name, outcome): getattr(c, column[outcome])
        for c in snap.counters
        for outcome in outcomes
        if getattr(c, column[outcome])
    }
    assert got == dict(expected)


# -- pauses and wakes -----------------------------------------------------------------------------------


async def test_the_lean_claim_honours_a_pause_too(pg_app: App) -> None:
    @pg_app.job(name="task", queue="paused", tenant="none")
    async def task(ctx: JobContext, payload: int) -> int:
        return payload

    await task.enqueue(1)
    await pg_app.admin.pause("paused")
    for sweep in (True, False):
        result = await pg_app.driver.claim(
            worker_id="w", wants={"paused": 5}, names=["task"], visibility=30, sweep=sweep
        )
        assert result.claimed == [] and result.next_due is None
    assert await pg_app.admin.resume("paused") is True
    result = await pg_app.driver.claim(worker_id="w", wants={"paused": 5}, names=["task"], visibility=30, sweep=False)
    assert len(result.claimed) == 1


async def test_requeue_promote_and_resume_notify_the_queue(pg_app: App, database_url: str) -> None:
    @pg_app.job(name="task", queue="woken", tenant="none", retry=Retry(attempts=1))
    async def task(ctx: JobContext, payload: int) -> None:
        raise ValueError("once")

    first = await task.enqueue(1)
    second = await task.enqueue(2)
    await pg_app.worker(queues=["woken"]).run(burst=True)
    later = await task.enqueue(3, delay="1h")
    later_too = await task.enqueue(4, delay="1h")
    await pg_app.admin.pause("woken")

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(q(pg_app.schema, f"listen {jobs_channel(pg_app.schema)}"))

        async def heard(action: Any) -> list[str]:
            await action
            got: list[str] = []
            async for note in listener.notifies(timeout=1.0, stop_after=1):
                got.append(note.payload)
            return got

        assert await heard(pg_app.admin.requeue(first.id)) == ["woken"]
        assert await heard(pg_app.admin.requeue_many(state="dead")) == ["woken"]
        assert await heard(pg_app.admin.promote(later.id)) == ["woken"]
        assert await heard(pg_app.admin.promote_many(state="delayed")) == ["woken"]
        # a sweep wake: the workers skipped the paused queue's delayed jobs, they must learn their due times
        assert await heard(pg_app.admin.resume("woken")) == [f"{sql.WAKE_SWEEP}woken"]
        assert await heard(pg_app.admin.resume("woken")) == []  # nothing resumed, nobody woken
    assert {(await pg_app.admin.get(r.id)).state for r in (second, later_too)} == {"ready"}  # type: ignore[union-attr]


async def test_an_enqueue_notifies_a_due_job_by_queue_and_a_delayed_one_as_a_sweep(
    pg_app: App, database_url: str
) -> None:
    """The listener reads a bare queue name as "a job is due now" (a lean claim is enough) and
    WAKE_SWEEP + queue as "a due time was set" (the worker's full claim learns when to wake)."""

    @pg_app.job(name="task", queue="nq", tenant="none")
    async def task(ctx: JobContext, payload: int) -> None:
        pass

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(q(pg_app.schema, f"listen {jobs_channel(pg_app.schema)}"))

        async def heard(action: Any) -> list[str]:
            await action
            got: list[str] = []
            async for note in listener.notifies(timeout=0.5):
                got.append(note.payload)
                if len(got) == 2:
                    break
            return sorted(got)

        assert await heard(task.enqueue(1)) == ["nq"]
        assert await heard(task.enqueue(2, delay="1h")) == [f"{sql.WAKE_SWEEP}nq"]
        assert await heard(task.enqueue_many([3, 4], delay="1h")) == [f"{sql.WAKE_SWEEP}nq"]
        assert await heard(task.enqueue_many([5, 6])) == ["nq"]
        assert await heard(task.enqueue(7, run_at=datetime.now(UTC) - timedelta(seconds=5))) == ["nq"]


@pytest.mark.parametrize("verb", ["requeue", "remove", "promote", "cancel"])
async def test_a_bulk_verb_skips_a_row_another_transaction_holds(pg_app: App, database_url: str, verb: str) -> None:
    """SKIP LOCKED: a row a worker is settling right now is left alone and stays in remaining."""

    @pg_app.job(name="task", tenant="none", retry=Retry(attempts=1))
    async def task(ctx: JobContext, payload: int) -> None:
        raise ValueError("x")

    state = {"requeue": "dead", "remove": "ready", "promote": "delayed", "cancel": "ready"}[verb]
    refs = [await task.enqueue(i, delay="1h" if state == "delayed" else 0) for i in range(3)]
    if state == "dead":
        await pg_app.worker().run(burst=True)
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute(
            q(pg_app.schema, "select 1 from {schema}.jobs where id = %(id)s for update"), {"id": refs[0].id}
        )
        result = await pg_app.driver.bulk(verb, BulkFilter(state), limit=10, dry_run=False)  # type: ignore[arg-type]
        assert (result.affected, result.remaining) == (2, 1)
        await holder.rollback()
    result = await pg_app.driver.bulk(verb, BulkFilter(state), limit=10, dry_run=False)  # type: ignore[arg-type]
    assert (result.affected, result.remaining) == (1, 0)
