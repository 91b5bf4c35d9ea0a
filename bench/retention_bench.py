"""Retention at scale (issue 15): what millions of finished rows cost, and what purging them costs.

    .venv/bin/python bench/retention_bench.py                  # 2,000,000 finished rows
    .venv/bin/python bench/retention_bench.py --rows 200000 --sustain 60 --json

Prints ONE JSON document on stdout (``--json``: compact) and progress on stderr. The database is
``WORKHORSE_DATABASE_URL``. Two schemas are created fresh (migrated by ``app.migrate()``) and
dropped at the end: ``bench_ret0_<hex>`` (no finished rows) and ``bench_retn_<hex>`` (N finished
rows, written by one ``INSERT ... SELECT generate_series`` per chunk: done/cancelled/failed/dead
92/2/3/3 %, finished 15 to 45 days ago, four queues, eight names, fifty tenants and some
untenanted). Then ``VACUUM ANALYZE`` (what autovacuum would have done by then).

A  claim + settle round trip: ``driver.claim(wants 1)`` (the full claim with its lapsed-lease
   sweep and the lean one, alternately) then ``driver.settle([Settlement(..., "done")])``, the two
   schemas interleaved call by call, each holding the same 1,000 ready jobs. Median per side, and
   the ratio N / 0.
B  ``app.admin.snapshot()`` and ``app.admin.stats()`` (what ``workhorse stats`` and the metrics
   endpoint read), interleaved, median per side; and SNAPSHOT's ``EXPLAIN (ANALYZE, BUFFERS)`` at
   N rows: the scans it runs and whether any is a sequential scan of ``jobs``.
C  ``app.admin.purge()`` with the default ``Retention()`` (batch 500) removing the N rows while
   ``app.worker(concurrency=10).run(burst=True)`` (same process) drains 20,000 live no-op jobs
   beside it; the drain alone (no purge, the 0 schema) first as the baseline.
D  sustained: enqueue 500 jobs/s for ``--sustain`` seconds with a worker (concurrency 10) and a
   ``Scheduler(app)`` (no cron task: it purges every ``every`` on its own), under
   ``Retention(done="5s", cancelled="5s", failed="5s", dead="5s", every="2s")``; the jobs table's
   rows and ``pg_total_relation_size`` sampled every 5 s. A purge deletes rows; only VACUUM makes
   their space reusable. On a server with ``autovacuum = off`` the bench stands in for it with a
   plain ``VACUUM`` of the table every ``--vacuum-every`` seconds (20; 0: never, to watch the file
   grow) and says so in its output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

import workhorse.retention.queries as retention_sql
from workhorse import App, JobContext, Retention
from workhorse.leader.scheduler import Scheduler
from workhorse.types import Settlement

QUEUE = "bench"
NAME = "bench.noop"
CHUNK = 250_000  # rows per fill statement
READY = 1_000  # A: ready jobs per schema
A_CALLS, A_WARMUP = 400, 40
B_CALLS, B_WARMUP = 25, 3
C_LIVE = 20_000
D_RATE, D_TICK, D_SAMPLE = 500, 0.1, 5.0
D_RETENTION = {"done": "5s", "cancelled": "5s", "failed": "5s", "dead": "5s", "every": "2s"}

# N finished rows, ids UUIDv7-shaped from created_at (id order is creation order, as workhorse's).
FILL = """
insert into {s}.jobs (id, name, queue, tenant, state, priority, payload, result, last_error, errors,
                      attempt, max_attempts, dead_letter, claims, run_at, created_at, started_at,
                      finished_at, updated_at)
select (lpad(to_hex((extract(epoch from g.created) * 1000)::bigint), 12, '0') || '7' || substr(g.h, 1, 3)
        || '8' || substr(g.h, 4, 15))::uuid,
       'bench.hist_' || (g.i %% 8), (array['default', 'email', 'reports', 'billing'])[1 + g.i %% 4],
       case when g.i %% 7 = 0 then null else 'org-' || lpad((g.i %% 50)::text, 3, '0') end,
       g.st, 0, jsonb_build_object('n', g.i, 'to', 'user@example.com'),
       case when g.st = 'done' then jsonb_build_object('ok', true) end,
       case when g.st in ('failed', 'dead') then '{{"type": "ValueError", "message": "boom"}}'::jsonb end,
       case when g.st in ('failed', 'dead') then '[{{"type": "ValueError", "message": "boom"}}]'::jsonb end,
       case when g.st in ('failed', 'dead') then 3 when g.st = 'cancelled' then 0 else 1 end, 3,
       g.st <> 'failed', case when g.st = 'cancelled' then 0 when g.st = 'done' then 1 else 3 end,
       g.created, g.created, case when g.st <> 'cancelled' then g.created + interval '1 second' end,
       g.fin, g.fin
from (
    select f.i, f.h, f.fin, f.fin - interval '2 seconds' as created,
           case when f.i %% 100 < 92 then 'done' when f.i %% 100 < 94 then 'cancelled'
                when f.i %% 100 < 97 then 'failed' else 'dead' end as st
    from (
        select i, md5(i::text || %(seed)s) as h,
               now() - interval '15 days' - (i::float8 / %(n)s) * interval '30 days' as fin
        from generate_series(%(lo)s::int, %(hi)s::int) as i
    ) as f
) as g
"""


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(v * 1000 for v in values)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 3),
        "n": len(ordered),
    }


def make_app(url: str, schema: str, retention: Retention | None = None) -> App:
    app = App(url, schema=schema, retention=retention)

    @app.job(name=NAME, queue=QUEUE, tenant="none")
    async def noop(ctx: JobContext, payload: Any) -> None:
        """Nothing: the figure is the queue's own cost."""

    return app


class Bench:
    def __init__(self, url: str, rows: int) -> None:
        self.url, self.rows = url, rows
        tag = secrets.token_hex(4)
        self.empty, self.full = f"bench_ret0_{tag}", f"bench_retn_{tag}"
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        assert self.conn is not None
        cur = await self.conn.execute(statement, params)  # type: ignore[arg-type]
        return await cur.fetchall() if cur.description else []

    async def scalar(self, statement: str, params: Any = None) -> Any:
        return (await self.sql(statement, params))[0][0]

    async def fill(self) -> float:
        started = time.perf_counter()
        for lo in range(1, self.rows + 1, CHUNK):
            hi = min(self.rows, lo + CHUNK - 1)
            await self.sql(FILL.format(s=self.full), {"seed": self.full, "n": self.rows, "lo": lo, "hi": hi})
            log(f"fill: {hi:,} of {self.rows:,} finished rows")
        seconds = time.perf_counter() - started
        for schema in (self.empty, self.full):
            await self.sql(f"vacuum analyze {schema}.jobs")
        return seconds

    async def visibility(self) -> dict[str, int]:
        pages, visible = (
            await self.sql(f"select relpages, relallvisible from pg_class where oid = '{self.full}.jobs'::regclass")
        )[0]
        return {"relpages": int(pages), "relallvisible": int(visible)}


async def enqueue(app: App, n: int) -> None:
    handle = app.jobs[NAME]
    for start in range(0, n, 5_000):
        await handle.enqueue_many([{"n": i} for i in range(start, min(n, start + 5_000))])


# -- A ------------------------------------------------------------------------------------------


async def claim_settle(apps: dict[str, App]) -> dict[str, Any]:
    series: dict[str, dict[str, list[float]]] = {
        side: {"claim_full": [], "claim_lean": [], "settle": [], "round_trip": []} for side in apps
    }
    for i in range(A_WARMUP + A_CALLS):
        sweep = i % 2 == 0
        for side, app in apps.items():
            t0 = time.perf_counter()
            got = await app.driver.claim(
                worker_id="bench-ret", wants={QUEUE: 1}, names=[NAME], visibility=30, sweep=sweep
            )
            t1 = time.perf_counter()
            (job,) = got.claimed
            landed = await app.driver.settle(
                [Settlement(job_id=job.id, worker_id="bench-ret", claims=job.claims, outcome="done", result="null")]
            )
            t2 = time.perf_counter()
            if landed != [True]:
                raise RuntimeError(f"A: the settle on {side} did not land")
            if i >= A_WARMUP:
                series[side]["claim_full" if sweep else "claim_lean"].append(t1 - t0)
                series[side]["settle"].append(t2 - t1)
                series[side]["round_trip"].append(t2 - t0)
    out: dict[str, Any] = {side: {k: ms(v) for k, v in s.items()} for side, s in series.items()}
    out["ratio"] = {
        k: round(out["with_rows"][k]["median_ms"] / out["without_rows"][k]["median_ms"], 3)
        for k in ("claim_full", "claim_lean", "settle", "round_trip")
    }
    return out


# -- B ------------------------------------------------------------------------------------------


def walk(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(walk(child))
    return nodes


async def explain_snapshot(b: Bench, schema: str) -> dict[str, Any]:
    from workhorse._db.queries.admin import SNAPSHOT

    statement = "explain (analyze, buffers, format json) " + SNAPSHOT.format(schema=schema)
    doc = (await b.scalar(statement, {"since": 3600.0}))[0]
    nodes = walk(doc["Plan"])
    scans = [
        " ".join(str(n[k]) for k in ("Node Type", "Relation Name", "Index Name") if k in n)
        + (f" (rows {n['Actual Rows'] * n.get('Actual Loops', 1)}, heap fetches {n['Heap Fetches']})"
           if "Heap Fetches" in n else f" (rows {n['Actual Rows'] * n.get('Actual Loops', 1)})")
        for n in nodes
        if "Scan" in n["Node Type"] and "Relation Name" in n
    ]  # fmt: skip
    return {
        "execution_ms": round(doc["Execution Time"], 3),
        "shared_buffers_hit": doc["Plan"].get("Shared Hit Blocks", 0),
        "shared_buffers_read": doc["Plan"].get("Shared Read Blocks", 0),
        "scans": scans,
        "seq_scan_of_jobs": any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs" for n in nodes),
    }


async def scrapes(b: Bench, apps: dict[str, App]) -> dict[str, Any]:
    series: dict[str, dict[str, list[float]]] = {side: {"snapshot": [], "stats": []} for side in apps}
    for i in range(B_WARMUP + B_CALLS):
        for side, app in apps.items():
            t0 = time.perf_counter()
            await app.admin.snapshot()
            t1 = time.perf_counter()
            await app.admin.stats()
            t2 = time.perf_counter()
            if i >= B_WARMUP:
                series[side]["snapshot"].append(t1 - t0)
                series[side]["stats"].append(t2 - t1)
    out: dict[str, Any] = {side: {k: ms(v) for k, v in s.items()} for side, s in series.items()}
    out["ratio"] = {
        k: round(out["with_rows"][k]["median_ms"] / out["without_rows"][k]["median_ms"], 3)
        for k in ("snapshot", "stats")
    }
    out["dead_failed_rows_counted"] = int(
        await b.scalar(f"select count(*) from {b.full}.jobs where state in ('dead', 'failed')")
    )
    out["explain_with_rows"] = await explain_snapshot(b, b.full)
    return out


# -- C ------------------------------------------------------------------------------------------


async def drain(app: App) -> tuple[float, Any]:
    started = time.perf_counter()
    stats = await app.worker(concurrency=10, handle_signals=False).run(burst=True)
    return time.perf_counter() - started, stats


async def purge_beside_drain(b: Bench, apps: dict[str, App]) -> dict[str, Any]:
    await enqueue(apps["without_rows"], C_LIVE)
    log(f"C: baseline, one worker (concurrency 10) drains {C_LIVE:,} jobs, no purge")
    alone_s, alone_stats = await drain(apps["without_rows"])
    full = apps["with_rows"]
    full.retention = Retention()  # the defaults: done 1d, cancelled 1d, failed 7d, dead 14d, batch 500
    await enqueue(full, C_LIVE)
    before = int(await b.scalar(f"select count(*) from {b.full}.jobs"))
    log(f"C: purge of {b.rows:,} finished rows beside a worker draining {C_LIVE:,} jobs")
    started = time.perf_counter()
    purge_end: list[float] = []

    async def purge() -> Any:
        report = await full.admin.purge()
        purge_end.append(time.perf_counter())
        return report

    batch_s: list[float] = []
    driver = full.driver
    fetch = driver.fetch

    async def timed(statement: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        try:
            return await fetch(statement, params)
        finally:
            if statement is retention_sql.PURGE_JOBS:
                batch_s.append(time.perf_counter() - t0)

    driver.fetch = timed  # type: ignore[method-assign]  # a stopwatch round each batch, nothing else
    purging = asyncio.create_task(purge())
    drain_s, wstats = await drain(full)
    at_drain_end = int(await b.scalar(f"select count(*) from {b.full}.jobs"))
    report = await purging
    driver.fetch = fetch  # type: ignore[method-assign]
    purge_s = purge_end[0] - started
    after = int(await b.scalar(f"select count(*) from {b.full}.jobs"))
    done_live = int(await b.scalar(f"select count(*) from {b.full}.jobs where state = 'done' and name = %s", (NAME,)))
    if done_live != READY + C_LIVE:
        raise RuntimeError(f"C: {done_live} live jobs done after the purge, expected {READY + C_LIVE}")
    snapshots = []
    for _ in range(B_CALLS):
        t0 = time.perf_counter()
        await full.admin.snapshot()
        snapshots.append(time.perf_counter() - t0)
    removed = report.to_dict()["removed"]["jobs"]
    total = sum(removed.values())
    # The drain's rows are all still there when it ends (fresh, done): the count fell by what the purge took.
    purged_during_drain = before - at_drain_end
    batches = -(-total // Retention().batch)
    return {
        "rows_before": before,
        "purged": removed,
        "purged_total": total,
        "purge_seconds": round(purge_s, 2),
        "purge_rows_per_s": round(total / purge_s, 1),
        "batches": batches,
        "batch_round_trip": {**ms(batch_s), "max_ms": round(max(batch_s) * 1000, 3)},
        "batch_note": "each batch is one autocommit statement: its row locks last at most its round trip",
        "rows_after": after,
        "live_jobs_done_after": done_live,
        "snapshot_after_purge": ms(snapshots),
        "drain_with_purge": {
            "jobs": wstats.completed,
            "seconds": round(drain_s, 3),
            "jobs_per_s": round(wstats.completed / drain_s, 1),
            "purged_meanwhile": purged_during_drain,
            "purge_rows_per_s_meanwhile": round(purged_during_drain / drain_s, 1),
            "worker_stats": wstats.as_dict(),
        },
        "drain_alone": {
            "jobs": alone_stats.completed,
            "seconds": round(alone_s, 3),
            "jobs_per_s": round(alone_stats.completed / alone_s, 1),
        },
        "drain_ratio": round((wstats.completed / drain_s) / (alone_stats.completed / alone_s), 3),
        "purge_overlapped_drain": purge_s > drain_s,
    }


# -- D ------------------------------------------------------------------------------------------


async def sustained(b: Bench, seconds: float, vacuum_every: float) -> dict[str, Any]:
    schema = f"{b.full}_d"
    app = make_app(b.url, schema, Retention(**D_RETENTION))
    await app.migrate()
    handle = app.jobs[NAME]
    size = (
        f"select count(*), pg_total_relation_size('{schema}.jobs'), pg_relation_size('{schema}.jobs') "
        f"from {schema}.jobs"
    )
    samples: list[dict[str, Any]] = []
    enqueued = 0
    stop = asyncio.Event()

    async def produce() -> None:
        nonlocal enqueued
        per_tick = int(D_RATE * D_TICK)
        next_at = time.perf_counter()
        while not stop.is_set():
            await handle.enqueue_many([{"n": enqueued + i} for i in range(per_tick)])
            enqueued += per_tick
            next_at += D_TICK
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.perf_counter()))

    autovacuum = await b.scalar("show autovacuum")
    vacuums: list[float] = []

    async def vacuum() -> None:  # stands in for autovacuum on a server that has it off
        async with await psycopg.AsyncConnection.connect(b.url, autocommit=True) as conn:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), vacuum_every)
                    return
                t0 = time.perf_counter()
                await conn.execute(f"vacuum {schema}.jobs")  # type: ignore[arg-type]
                vacuums.append(time.perf_counter() - t0)

    worker = app.worker(concurrency=10, handle_signals=False)
    scheduler = Scheduler(app, handle_signals=False)
    tasks = [asyncio.create_task(worker.run()), asyncio.create_task(scheduler.run())]
    if vacuum_every > 0 and autovacuum == "off":
        tasks.append(asyncio.create_task(vacuum()))
    producer = asyncio.create_task(produce())
    started = time.perf_counter()
    try:
        while (elapsed := time.perf_counter() - started) < seconds:
            rows, total, heap = (await b.sql(size))[0]
            samples.append({"t_s": round(elapsed, 1), "rows": int(rows), "total_kb": int(total) // 1024,
                            "heap_kb": int(heap) // 1024, "enqueued": enqueued})  # fmt: skip
            log(f"D: t={elapsed:5.1f}s rows={rows:,} total={int(total) // 1024:,} kB enqueued={enqueued:,}")
            await asyncio.sleep(D_SAMPLE)
    finally:
        stop.set()
        await producer
        await worker.stop()
        await scheduler.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        vac = await b.sql(
            "select autovacuum_count, autoanalyze_count, n_dead_tup from pg_stat_user_tables "
            "where schemaname = %s and relname = 'jobs'",
            (schema,),
        )
        await app.close()
        await b.sql(f"drop schema if exists {schema} cascade")
    third = max(1, len(samples) // 3)
    middle, last = samples[third : 2 * third], samples[2 * third :]
    peak = {k: max(s[k] for s in samples) for k in ("rows", "total_kb")}

    def levelled(key: str, slack: float) -> bool:
        return max(s[key] for s in last) <= slack * max(s[key] for s in middle + samples[:third])

    return {
        "retention": D_RETENTION,
        "rate_jobs_per_s": D_RATE,
        "seconds": seconds,
        "enqueued": enqueued,
        "samples": samples,
        "peak": peak,
        "levelled_off": {"rows": levelled("rows", 1.25), "total_size": levelled("total_kb", 1.25)},
        "rule": "levelled: the last third's max is at most 1.25x the max of the first two thirds",
        "server_autovacuum": autovacuum,
        "autovacuum_runs": vac[0][0] if vac else None,
        "bench_vacuums": {
            "every_s": vacuum_every if autovacuum == "off" else 0,
            "runs": len(vacuums),
            "max_ms": round(max(vacuums, default=0) * 1000, 1),
        },
    }


# -- main ---------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    url = os.environ.get("WORKHORSE_DATABASE_URL")
    if not url:
        raise SystemExit("set WORKHORSE_DATABASE_URL")
    b = Bench(url, args.rows)
    b.conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    apps = {"without_rows": make_app(url, b.empty), "with_rows": make_app(url, b.full)}
    out: dict[str, Any] = {
        "bench": "retention",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "postgres": await b.scalar("show server_version"),
        },
        "rows": args.rows,
        "fill": "done/cancelled/failed/dead 92/2/3/3 %, finished_at 15..45 days ago, 4 queues, 8 names, 50 tenants",
    }
    try:
        for app in apps.values():
            await app.migrate()
        log(f"fill: {args.rows:,} finished rows into {b.full}")
        out["fill_seconds"] = round(await b.fill(), 1)
        out["visibility_after_vacuum"] = await b.visibility()
        out["jobs_table_mb"] = round(await b.scalar(f"select pg_total_relation_size('{b.full}.jobs')") / 2**20, 1)
        for app in apps.values():
            await enqueue(app, READY)
        log("A: claim + settle round trips, interleaved")
        out["A_claim_settle"] = claim_settle_out = await claim_settle(apps)
        log(f"A: ratio {claim_settle_out['ratio']}")
        log("B: snapshot / stats, interleaved")
        out["B_scrapes"] = await scrapes(b, apps)
        log(f"B: {out['B_scrapes']['with_rows']} vs {out['B_scrapes']['without_rows']}")
        out["C_purge"] = await purge_beside_drain(b, apps)
        c = out["C_purge"]
        log(f"C: purge {c['purge_rows_per_s']} rows/s, drain {c['drain_with_purge']['jobs_per_s']} jobs/s")
        if args.sustain > 0:
            log(f"D: sustained run, {args.sustain:g} s")
            out["D_sustained"] = await sustained(b, args.sustain, args.vacuum_every)
    finally:
        for app in apps.values():
            await app.close()
        for schema in (b.empty, b.full):
            await b.sql(f"drop schema if exists {schema} cascade")
        await b.conn.close()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--sustain", type=float, default=180.0, help="seconds of D (0: skip)")
    parser.add_argument(
        "--vacuum-every",
        type=float,
        default=20.0,
        help="D on a server with autovacuum off: VACUUM the jobs table this often (0: never)",
    )
    parser.add_argument("--json", action="store_true", help="compact JSON")
    parsed = parser.parse_args()
    result = asyncio.run(main(parsed))
    print(json.dumps(result, indent=None if parsed.json else 2, default=str))
