"""What the leader's vacuum duty buys on a server without autovacuum (issue 31).

    .venv/bin/python bench/vacuum_bench.py                      # ~500,000 dead rows
    .venv/bin/python bench/vacuum_bench.py --churn 20000 --json # a quick look

Prints ONE JSON document on stdout (``--json``: compact) and progress on stderr. The database is
``WORKHORSE_DATABASE_URL``; a fresh schema ``bench_vac_<hex>`` is migrated and dropped at the end.

The dead rows are what a queue's lifecycle leaves: ``--churn`` ready jobs are enqueued, their
``run_at`` moved ``--rounds`` times (each UPDATE changes a column of the claim's partial index, so
every version leaves a dead heap row and a dead entry in that index ahead of the live ones), then
they are cancelled: (rounds + 1) x churn dead rows. Then ``--ready`` fresh jobs are enqueued
behind them, and ``--claims`` claim + settle round trips are timed (the claim alone: p50, p95).
Then ONE turn of the vacuum duty (``VacuumDuty.turn()`` with its defaults: the table furthest past
10,000 + 5% dead rows), and the same round trips again. Autovacuum should be off on the server
(the bench says whether it is): with it on, it may get there first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from typing import Any

import psycopg

from workhorse import App, JobContext
from workhorse.leader.vacuum import VacuumDuty
from workhorse.types import Settlement

QUEUE = "bench"
NAME = "bench.noop"


def log(message: str) -> None:
    print(f"[vacuum_bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(v * 1000 for v in values)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 3),
        "n": len(ordered),
    }


async def enqueue(app: App, n: int) -> None:
    handle = app.jobs[NAME]
    for start in range(0, n, 5_000):
        await handle.enqueue_many([{"n": i} for i in range(start, min(n, start + 5_000))])


async def claims(app: App, n: int) -> dict[str, float]:
    timed = []
    for _ in range(n):
        t0 = time.perf_counter()
        got = await app.driver.claim(worker_id="bench-vac", wants={QUEUE: 1}, names=[NAME], visibility=30, sweep=False)
        timed.append(time.perf_counter() - t0)
        (job,) = got.claimed
        await app.driver.settle(
            [Settlement(job_id=job.id, worker_id="bench-vac", claims=job.claims, outcome="done", result="null")]
        )
    return ms(timed)


def table(url: str, schema: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("select pg_stat_force_next_flush()")
        row = conn.execute(
            "select n_live_tup, n_dead_tup, pg_relation_size(relid), "
            f"pg_relation_size('{schema}.jobs_due_idx'::regclass) "
            "from pg_stat_user_tables where schemaname = %s and relname = 'jobs'",
            (schema,),
        ).fetchone()
    assert row is not None
    return {"live": row[0], "dead": row[1], "heap_bytes": row[2], "due_index_bytes": row[3]}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    url = os.environ["WORKHORSE_DATABASE_URL"]
    schema = f"bench_vac_{secrets.token_hex(4)}"
    app = App(url, schema=schema)

    @app.job(name=NAME, queue=QUEUE, tenant="none")
    async def noop(ctx: JobContext, payload: Any) -> None:
        return None

    out: dict[str, Any] = {"schema": schema, "churn": args.churn, "rounds": args.rounds, "ready": args.ready}
    try:
        await app.migrate()
        with psycopg.connect(url, autocommit=True) as conn:
            setting = conn.execute("show autovacuum").fetchone()
            out["server"] = {"autovacuum": setting[0] if setting else None, "version": conn.info.server_version}
        log(f"enqueueing {args.churn:,} jobs to churn")
        await enqueue(app, args.churn)
        with psycopg.connect(url, autocommit=True) as conn:
            for i in range(args.rounds):
                log(f"churn round {i + 1} of {args.rounds}")
                conn.execute(f"update {schema}.jobs set run_at = run_at + interval '1 microsecond'")  # type: ignore[arg-type]
            conn.execute(
                f"update {schema}.jobs set state = 'cancelled', finished_at = now()"  # type: ignore[arg-type]
            )
        log(f"enqueueing {args.ready:,} fresh ready jobs")
        await enqueue(app, args.ready)
        out["before"] = {"table": table(url, schema)}
        log(f"dead rows: {out['before']['table']['dead']:,}; timing {args.claims} claims")
        out["before"]["claim"] = await claims(app, args.claims)
        duty = VacuumDuty("s-bench", lambda: app.driver)
        t0 = time.perf_counter()
        vacuumed = await duty.turn()
        out["turn"] = {"vacuumed": vacuumed, "seconds": round(time.perf_counter() - t0, 3)}
        log(f"one duty turn: {out['turn']}")
        out["after"] = {"table": table(url, schema)}
        out["after"]["claim"] = await claims(app, args.claims)
        out["claim_p50_ratio_before_after"] = round(
            out["before"]["claim"]["p50_ms"] / out["after"]["claim"]["p50_ms"], 2
        )
    finally:
        await app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--churn", type=int, default=100_000, help="jobs whose versions become dead rows")
    parser.add_argument("--rounds", type=int, default=4, help="UPDATEs of each churned job before its cancel")
    parser.add_argument("--ready", type=int, default=2_000, help="fresh ready jobs claimed behind the dead rows")
    parser.add_argument("--claims", type=int, default=300, help="claim + settle round trips timed on each side")
    parser.add_argument("--json", action="store_true", help="compact JSON")
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    print(json.dumps(result, separators=(",", ":")) if arguments.json else json.dumps(result, indent=2))
