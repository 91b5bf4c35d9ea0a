"""What an open dashboard costs the database: the statements one overview refresh runs (counted at
the driver, through the real HTTP route), and the plans of the overview's and the jobs page's
statements at 1,000,000 rows (no sequential scan of jobs or counters)."""

from __future__ import annotations

import re
import time
from typing import Any, LiteralString, cast

import httpx
import psycopg
import pytest

from workhorse import App, JobContext, Limits
from workhorse._db.queries import admin as admin_sql
from workhorse._db.queries import series as series_sql
from workhorse.dashboard import make_asgi_app
from workhorse.drivers.base import SEARCH_SCAN

ROWS = 1_000_000


class Counted:
    """Counts the statements (``fetch``) and the connections borrowed by a driver."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, driver: Any) -> None:
        self.fetches = 0
        self.borrows = 0
        fetch, connection = driver.fetch, driver.connection

        async def counted_fetch(*args: Any, **kwargs: Any) -> Any:
            self.fetches += 1
            return await fetch(*args, **kwargs)

        def counted_connection(*args: Any, **kwargs: Any) -> Any:
            self.borrows += 1
            return connection(*args, **kwargs)

        monkeypatch.setattr(driver, "fetch", counted_fetch)
        monkeypatch.setattr(driver, "connection", counted_connection)


def declare(app: App) -> Any:
    @app.job("dash.ok", queue="emails", tenant=lambda p: p["org"])
    async def ok(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    return ok


async def refresh_cost(app: App, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    ok = declare(app)
    await ok.enqueue_many([{"org": f"o{i % 3}"} for i in range(20)])
    await app.worker(concurrency=4).run(burst=True)
    await ok.enqueue_many([{"org": "o1"} for _ in range(5)])
    transport = httpx.ASGITransport(app=make_asgi_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        assert (await http.get("/overview/live")).status_code == 200  # warm: the pool is open
        counted = Counted(monkeypatch, app.driver)
        for _ in range(3):
            page = await http.get("/overview/live")
            assert page.status_code == 200 and "emails" in page.text
    return counted.fetches // 3, counted.borrows // 3


async def test_one_overview_refresh_is_two_statements(pg_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """SNAPSHOT (states, counters, pauses, workers in one statement) and COUNTER_MINUTES. At the
    default refresh of 5 s, one open overview costs 24 statements a minute."""
    assert await refresh_cost(pg_app, monkeypatch) == (2, 2)


async def test_with_declared_caps_a_refresh_is_four_statements(
    database_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app with flow control also reads what holds its caps (FLOW_USAGE, FLOW_HELD_BACK)."""
    app = App(database_url, schema=schema, limits=Limits(per_tenant=2))
    await app.migrate()
    try:
        assert await refresh_cost(app, monkeypatch) == (4, 4)
    finally:
        await app.close()


# -- plans at 1,000,000 rows ------------------------------------------------------------------------


def q(schema: str, statement: str) -> LiteralString:
    return cast(LiteralString, statement.replace("{schema}", schema))


def explain(conn: psycopg.Connection[Any], schema: str, statement: str, params: dict[str, Any]) -> str:
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", positional, statement.replace("{schema}", schema))
    conn.execute(q(schema, f"prepare explained as {text}"))
    try:
        literals = ", ".join(psycopg.sql.Literal(params[n]).as_string(conn) for n in names)
        rows = conn.execute(q(schema, f"explain (analyze, costs off, timing off) execute explained({literals})"))
        return "\n".join(r[0] for r in rows.fetchall())
    finally:
        conn.execute("deallocate explained")


def fill(conn: psycopg.Connection[Any], schema: str, rows: int) -> None:
    """``rows`` jobs on eight queues and ten names, 92% done, the rest ready, dead, delayed,
    running and failed; counters for a year of days, two days of hours and two hours of minutes."""
    conn.execute(
        q(
            schema,
            """
            insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, run_at, created_at,
                                       worker_id, lease_expires_at, last_error)
            select gen_random_uuid(), 'name' || (g %% 10), 'q' || (g %% 8),
                   s.state, jsonb_build_object('order', g, 'customer', jsonb_build_object('id', g %% 5000)), 3,
                   case when s.state = 'delayed' then now() + interval '1 hour' else now() - interval '1 minute' end,
                   now() - g * interval '10 millisecond',
                   case when s.state = 'running' then 'w-bench' end,
                   case when s.state = 'running' then now() + interval '1 minute' end,
                   case when s.state in ('dead', 'failed') then jsonb_build_object(
                       'type', 'RuntimeError', 'message', 'upstream ' || (g %% 997) || ' refused the call') end
            from generate_series(1, %(rows)s) as g,
                 lateral (select case when g %% 100 < 92 then 'done' when g %% 100 < 95 then 'ready'
                                      when g %% 100 < 97 then 'dead' when g %% 100 < 98 then 'delayed'
                                      when g %% 100 < 99 then 'running' else 'failed' end as state) as s
            """,
        ),
        {"rows": rows},
    )
    for tier, unit, count in (("day", "day", 365), ("hour", "hour", 48), ("minute", "minute", 120)):
        conn.execute(
            q(
                schema,
                f"""
                insert into {{schema}}.counters (tier, bucket, queue, name, completed, retried, failed, dead, lapsed)
                select '{tier}', date_trunc('{unit}', now(), 'UTC') - b * interval '1 {unit}', 'q' || qn,
                       'name' || nn, 100, 2, 1, 1, 0
                from generate_series(0, {count - 1}) as b, generate_series(0, 7) as qn, generate_series(0, 9) as nn
                """,
            )
        )
    conn.execute(q(schema, "vacuum analyze {schema}.jobs"))
    conn.execute(q(schema, "vacuum analyze {schema}.counters"))


async def test_the_dashboards_statements_are_index_backed_at_a_million_rows(pg_app: App, database_url: str) -> None:
    schema = pg_app.schema
    with psycopg.connect(database_url, autocommit=True, options="-c TimeZone=UTC") as conn:
        fill(conn, schema, ROWS)
        snapshot = explain(conn, schema, admin_sql.SNAPSHOT, {"since": 3600.0})
        minutes = explain(conn, schema, series_sql.COUNTER_MINUTES, {"minutes": 60})
        dead_page = explain(
            conn,
            schema,
            admin_sql.list_page(["queue", "state"], backwards=False),
            {"queue": "q3", "state": "dead", "limit": 50},
        )
    for plan in (snapshot, minutes, dead_page):
        assert "Seq Scan on jobs" not in plan and "Seq Scan on counters" not in plan, plan
    # The failed and dead rows through a partial index: the failures' one, index-only once the
    # vacuum's visibility map is set; while another test's open snapshot keeps the vacuum from
    # marking the pages, a bitmap scan of it or of the finished rows' index (seen: the planner
    # takes either then). Never the whole table (above).
    failures = r"(Index Only Scan using|Bitmap Index Scan on) jobs_failures_idx"
    assert re.search(failures + r"|Bitmap Index Scan on jobs_finished_idx", snapshot), snapshot
    # A range of the primary key (tier, bucket, ...): the minute rows of the hour, not the year beside them.
    assert "Index Scan on counters_pkey" in minutes and "'minute'::text) AND (bucket >= " in minutes, minutes
    # 60 minutes x 8 queues x 10 names read (59 when a minute turned since the fill), summed per queue.
    # (A bitmap scan while another test's open snapshot keeps a dead row version: its index returns
    # one more entry than the heap gives back, so the rows are counted at the heap scan.)
    assert re.search(
        r"(Index Scan on counters_pkey|Bitmap Heap Scan on counters c) \(actual rows=(4800|4720) ", minutes
    ), minutes
    assert "jobs_pkey" in dead_page, dead_page

    # What the dashboard answers from them, at this size: one refresh and one filtered page.
    started = time.monotonic()
    stats = await pg_app.admin.stats("1h")
    series = await pg_app.admin.counter_minutes("1h")
    refresh = time.monotonic() - started
    assert len(stats.queues) == 8 and len(series) in (60 * 8, 59 * 8)
    assert sum(q.dead for q in stats.queues) == ROWS * 2 // 100
    started = time.monotonic()
    page = await pg_app.admin.list(state="dead", queue="q3", limit=50)
    assert len(page.jobs) == 50 and {j.state for j in page.jobs} == {"dead"}
    listing = time.monotonic() - started
    assert refresh < 10 and listing < 10  # generous: the figures themselves are bench/dashboard_bench.py's


async def test_a_search_walks_a_bounded_stretch_of_the_primary_key_at_a_million_rows(
    pg_app: App, database_url: str
) -> None:
    """Issue 29: each page of a search walks at most SEARCH_SCAN rows from its cursor, whatever
    matches: a payload search along jobs_pkey (no index on payloads), an error search along
    jobs_errored_idx (the jobs that ever failed, migration 020)."""
    schema = pg_app.schema
    with psycopg.connect(database_url, autocommit=True, options="-c TimeZone=UTC") as conn:
        fill(conn, schema, ROWS)
        scan = {"scan": SEARCH_SCAN, "limit": 50}
        plans = {
            "error": explain(
                conn, schema, admin_sql.search_page(["state"], ["error"], backwards=False),
                {**scan, "state": "dead", "error_like": "%upstream 7 refused%"},
            ),
            "payload": explain(
                conn, schema, admin_sql.search_page([], ["payload"], backwards=False),
                {**scan, "payload": '{"customer": {"id": 4242}}'},
            ),
            "nothing": explain(
                conn, schema, admin_sql.search_page(["queue"], ["payload"], backwards=False),
                {**scan, "queue": "q1", "payload": '{"order": -1}'},
            ),
        }  # fmt: skip
    for what, plan in plans.items():
        assert "Seq Scan on jobs" not in plan, (what, plan)
        walked = "jobs_errored_idx" if what == "error" else "jobs_pkey"
        assert re.search(rf"Index (Only )?Scan Backward using {walked}", plan), (what, plan)
        # the walk stops at its budget: a rare error, an absent payload: 10,000 rows read, not 1,000,000
        assert re.search(rf"Limit \(actual rows={SEARCH_SCAN} ", plan), (what, plan)

    timings = {}
    for what, search in (
        ("error", {"state": "dead", "error": "upstream 7 refused"}),
        ("payload", {"payload": {"order": -1}}),
    ):
        started = time.monotonic()
        page = await pg_app.admin.list(limit=50, **search)  # type: ignore[arg-type]
        timings[what] = time.monotonic() - started
        assert page.scanned == SEARCH_SCAN and page.next is not None  # the next page searches on
    assert all(seconds < 10 for seconds in timings.values()), timings  # generous; measured in the report
