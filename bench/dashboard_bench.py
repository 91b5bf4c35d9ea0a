"""What an open dashboard costs (issue 21): the overview's refresh and the pages, at 1,000,000 jobs.

    .venv/bin/python bench/dashboard_bench.py                 # 1,000,000 jobs
    .venv/bin/python bench/dashboard_bench.py --rows 100000 --json

Prints ONE JSON document on stdout and progress on stderr; also ``bench/run.py --only D1``. The
database is ``WORKHORSE_DATABASE_URL``. One schema ``bench_dash_<hex>`` is created (migrated by
``app.migrate()``), filled by one ``INSERT ... SELECT generate_series``: eight queues, ten names,
92% done, 3% ready, 2% dead, 1% each delayed, running and failed; counters for a year of days, two
days of hours and two hours of minutes per (queue, name); then ``VACUUM ANALYZE``. Dropped at the end.

Measured through the dashboard's own HTTP routes (httpx's ASGI transport, no network):

- ``GET /overview/live`` (what the open overview fetches every ``refresh_seconds``): median and
  p95 ms over 30 calls, and the statements one refresh runs (counted at the driver), so the
  statements a minute one open overview costs at the default refresh of 5 s;
- ``GET /jobs?state=dead&queue=q3`` and ``GET /jobs/<id>``: median ms;
- the plans of SNAPSHOT and COUNTER_MINUTES at this size: their scans, and whether any is a
  sequential scan of jobs or counters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import statistics
import sys
import time
from typing import Any

import httpx
import psycopg

from workhorse import App, JobContext
from workhorse._db.queries import admin as admin_sql
from workhorse._db.queries import series as series_sql
from workhorse.dashboard import make_asgi_app

CALLS = 30
REFRESH_SECONDS = 5.0

FILL_JOBS = """
insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, run_at, created_at, worker_id,
                           lease_expires_at)
select gen_random_uuid(), 'name' || (g % 10), 'q' || (g % 8), s.state, '{{}}'::jsonb, 3,
       case when s.state = 'delayed' then now() + interval '1 hour' else now() - interval '1 minute' end,
       now() - g * interval '10 millisecond',
       case when s.state = 'running' then 'w-bench' end,
       case when s.state = 'running' then now() + interval '1 hour' end
from generate_series(1, {rows}) as g,
     lateral (select case when g % 100 < 92 then 'done' when g % 100 < 95 then 'ready'
                          when g % 100 < 97 then 'dead' when g % 100 < 98 then 'delayed'
                          when g % 100 < 99 then 'running' else 'failed' end as state) as s
"""
FILL_COUNTERS = """
insert into {schema}.counters (tier, bucket, queue, name, completed, retried, failed, dead, lapsed)
select '{tier}', date_trunc('{tier}', now(), 'UTC') - b * interval '1 {tier}', 'q' || qn, 'name' || nn,
       100, 2, 1, 1, 0
from generate_series(0, {count}) as b, generate_series(0, 7) as qn, generate_series(0, 9) as nn
"""


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def fill(url: str, schema: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True, options="-c TimeZone=UTC") as conn:
        conn.execute(FILL_JOBS.format(schema=schema, rows=int(rows)).encode())
        for tier, count in (("day", 364), ("hour", 47), ("minute", 119)):
            conn.execute(FILL_COUNTERS.format(schema=schema, tier=tier, count=count).encode())
        conn.execute(f"vacuum analyze {schema}.jobs".encode())
        conn.execute(f"vacuum analyze {schema}.counters".encode())


def plan_of(url: str, schema: str, statement: str, params: dict[str, Any]) -> str:
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", positional, statement.replace("{schema}", schema))
    with psycopg.connect(url, autocommit=True, options="-c TimeZone=UTC") as conn:
        conn.execute(f"prepare explained as {text}".encode())
        literals = ", ".join(psycopg.sql.Literal(params[n]).as_string(conn) for n in names)
        rows = conn.execute(f"explain (analyze, buffers, costs off) execute explained({literals})".encode())
        return "\n".join(r[0] for r in rows.fetchall())


def scans(plan: str) -> list[str]:
    return sorted(
        {
            m.group(0).strip()
            for m in re.finditer(r"(Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)[^(\n]*", plan)
        }
    )


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000, 2),
    }


async def timed(http: httpx.AsyncClient, path: str, calls: int = CALLS) -> list[float]:
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        answer = await http.get(path)
        out.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path} answered {answer.status_code}")
    return out


async def measure(url: str, rows: int) -> dict[str, Any]:
    schema = f"bench_dash_{secrets.token_hex(4)}"
    app = App(url, schema=schema)

    @app.job("name0", queue="q0", tenant="none")
    async def name0(ctx: JobContext, payload: Any) -> None:
        """Declared so the app knows a name; never run."""

    try:
        await app.migrate()
        log(f"filling {schema} with {rows:,} jobs and a year of counters")
        started = time.perf_counter()
        await asyncio.to_thread(fill, url, schema, rows)
        log(f"filled in {time.perf_counter() - started:.1f}s")
        driver = app.driver
        statements = {"n": 0}
        fetch = driver.fetch

        async def counted(*args: Any, **kwargs: Any) -> Any:
            statements["n"] += 1
            return await fetch(*args, **kwargs)

        driver.fetch = counted  # type: ignore[method-assign]
        transport = httpx.ASGITransport(app=make_asgi_app(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            await timed(http, "/overview/live", 3)  # warm the pool and the caches
            statements["n"] = 0
            refresh = await timed(http, "/overview/live")
            per_refresh = statements["n"] / CALLS
            jobs_page = await timed(http, "/jobs?state=dead&queue=q3")
            some = (await app.admin.list(state="dead", queue="q3", limit=1)).jobs[0].id
            job_page = await timed(http, f"/jobs/{some}")
            overview = await timed(http, "/", 10)
        snapshot = await asyncio.to_thread(plan_of, url, schema, admin_sql.SNAPSHOT, {"since": 3600.0})
        minutes = await asyncio.to_thread(plan_of, url, schema, series_sql.COUNTER_MINUTES, {"minutes": 60})
        big = ("Seq Scan on jobs", "Seq Scan on counters")  # the pauses and workers tables are a few rows
        seq = [n for n, p in (("SNAPSHOT", snapshot), ("COUNTER_MINUTES", minutes)) if any(s in p for s in big)]
        return {
            "rows": rows,
            "overview_refresh": {
                **ms(refresh),
                "statements_per_refresh": per_refresh,
                "statements_per_minute_at_5s": per_refresh * 60 / REFRESH_SECONDS,
            },
            "overview_page": ms(overview),
            "jobs_page_dead_q3": ms(jobs_page),
            "job_page": ms(job_page),
            "plans": {
                "SNAPSHOT": scans(snapshot),
                "COUNTER_MINUTES": scans(minutes),
                "sequential_scans_of_jobs_or_counters": seq,
            },
        }
    finally:
        await app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade".encode())


async def d1(b: Any) -> dict[str, Any]:
    """``bench/run.py --only D1``: the same figures at 1,000,000 jobs (200,000 with --quick)."""
    rows = 1_000_000 if b.sizes.rounds > 1 else 200_000
    result = await measure(b.url, rows)
    log(f"D1: refresh {result['overview_refresh']['median_ms']} ms at {rows:,} jobs")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true", help="compact JSON")
    args = parser.parse_args()
    from workhorse.embedded import resolve_database_url

    result = asyncio.run(measure(resolve_database_url(None), args.rows))
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
