"""Backfills (issue 17): a pass's rows/s, and what it does to a live single-row update's latency.

    .venv/bin/python bench/backfill_bench.py                    # 1,000,000 rows
    .venv/bin/python bench/backfill_bench.py --rows 50000 --paced 20000

Prints ONE JSON document on stdout and progress on stderr. The database is
``WORKHORSE_DATABASE_URL``. A schema ``bench_bf_<hex>`` is created (migrated), filled with an
``items`` table of N rows (``id int primary key, name text, slug text``; one ``INSERT ... SELECT
generate_series`` per chunk, then ``VACUUM ANALYZE``) and dropped at the end.

The pass: ``@app.backfill("fill", batch_size=1000, count=...)`` whose function sets ``slug`` on the
next 1,000 ids after the cursor (one ``UPDATE ... FROM (SELECT id ... ORDER BY id LIMIT n)
RETURNING id``), run by ``app.worker(concurrency=1).run(burst=True)`` in this process: rows/s is
the ledger's rows over the wall time of that run (worker start and the two count() calls included).

The live workload: a separate process (``--probe``, so this process's CPU does not land in its
figures) sends ``UPDATE items SET name = name WHERE id = <random>`` in autocommit every 5 ms and
records each statement's latency; p50/p99 for ``--baseline-seconds`` without the pass, then for the
whole pass. A probe's row that falls inside the batch in flight waits for that batch's commit: that
is the p99 a pass costs, and what ``batch_size`` bounds. ``--paced R`` runs a second, forced pass
with ``rows_per_second=R`` beside the probe too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from workhorse import App
from workhorse import backfill as bf

CHUNK = 250_000
BATCH = 1_000
PROBE_EVERY = 0.005


def log(message: str) -> None:
    print(f"[backfill bench {datetime.now(UTC).strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentiles(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"samples": 0}
    ordered = sorted(samples)
    return {
        "samples": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


def probe(url: str, schema: str, rows: int, seconds: float) -> None:
    """The live workload (a subprocess): single-row updates until SIGTERM or ``seconds`` pass."""
    stop = False

    def stopped(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopped)
    latencies: list[float] = []
    statement = f"update {schema}.items set name = name where id = %s::int"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("select 1")
        deadline = time.monotonic() + seconds if seconds > 0 else float("inf")
        while not stop and time.monotonic() < deadline:
            began = time.perf_counter()
            conn.execute(statement, (random.randint(1, rows),))  # type: ignore[arg-type]
            took = time.perf_counter() - began
            latencies.append(took)
            time.sleep(max(PROBE_EVERY - took, 0))
    sys.stdout.write(json.dumps(latencies))
    sys.stdout.flush()


def start_probe(url: str, schema: str, rows: int, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--probe", url, schema, str(rows), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )


def probe_result(proc: subprocess.Popen[str], *, stop: bool) -> dict[str, Any]:
    if stop:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return percentiles(json.loads(out))


def declare(app: App, schema: str) -> None:
    items = f"{schema}.items"

    async def count_missing(conn: Any) -> int:
        cur = await conn.execute(f"select count(*) from {items} where slug is null")
        row = await cur.fetchone()
        return int(row[0])

    async def fill(conn: Any, cursor: Any, limit: int) -> bf.Batch | None:
        cur = await conn.execute(
            f"update {items} as i set slug = 'item-' || i.id "
            f"from (select id from {items} where id > %s::int order by id limit %s::int) as b "
            "where i.id = b.id returning i.id",
            (cursor or 0, limit),
        )
        ids = [row[0] for row in await cur.fetchall()]
        return bf.Batch(max(ids), rows=len(ids)) if ids else None

    app.backfill("fill", tenant="none", batch_size=BATCH, count=count_missing)(fill)
    app._bench_fill = fill  # type: ignore[attr-defined]


async def one_pass(app: App, url: str, schema: str, rows: int, name: str, *, force: bool) -> dict[str, Any]:
    started = await bf.start(app, name, force=force)
    probe_proc = start_probe(url, schema, rows, 0)
    await asyncio.sleep(0.5)  # the probe is connected and running before the pass starts
    began = time.monotonic()
    await app.worker(concurrency=1).run(burst=True)
    wall = time.monotonic() - began
    latency = await asyncio.to_thread(probe_result, probe_proc, stop=True)
    row = await bf.read_pass(app, started.pass_id)
    if row is None or row["status"] != "completed":
        raise RuntimeError(f"the pass did not complete: {row}")
    return {
        "rows": row["rows"],
        "batches": row["batches"],
        "seconds": round(wall, 3),
        "rows_per_s": round(row["rows"] / wall),
        "update_latency_during": latency,
    }


async def bench(args: argparse.Namespace, url: str) -> dict[str, Any]:
    schema = f"bench_bf_{secrets.token_hex(4)}"
    app = App(url, schema=schema)
    declare(app, schema)
    try:
        await app.migrate()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(f"create table {schema}.items (id int primary key, name text not null, slug text)")  # type: ignore[arg-type]
            for low in range(1, args.rows + 1, CHUNK):
                high = min(low + CHUNK - 1, args.rows)
                fill = f"insert into {schema}.items (id, name) select i, 'Item ' || i "
                fill += "from generate_series(%s::int, %s::int) as i"
                await conn.execute(fill, (low, high))  # type: ignore[arg-type]
            await conn.execute(f"vacuum analyze {schema}.items")  # type: ignore[arg-type]
        log(f"{args.rows:,} rows in {schema}.items; baseline probe for {args.baseline_seconds:g}s")
        baseline = await asyncio.to_thread(
            probe_result, start_probe(url, schema, args.rows, args.baseline_seconds), stop=False
        )
        log(f"baseline p50 {baseline['p50_ms']} ms p99 {baseline['p99_ms']} ms; the pass (batch {BATCH:,})")
        unpaced = await one_pass(app, url, schema, args.rows, "fill", force=False)
        log(f"pass: {unpaced['rows_per_s']:,} rows/s; during it p50 {unpaced['update_latency_during']['p50_ms']} ms")
        result: dict[str, Any] = {
            "rows": args.rows,
            "batch_size": BATCH,
            "probe_every_ms": PROBE_EVERY * 1000,
            "baseline": baseline,
            "pass": unpaced,
        }
        if args.paced:
            fill = app._bench_fill  # type: ignore[attr-defined]
            app.backfill("fill-paced", tenant="none", batch_size=BATCH, rows_per_second=args.paced)(fill)
            log(f"a second pass capped at rows_per_second={args.paced:,}")
            result["paced"] = {
                "rows_per_second": args.paced,
                **await one_pass(app, url, schema, args.rows, "fill-paced", force=False),
            }
        result["load"] = os.getloadavg()
        result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
        return result
    finally:
        await app.close()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]


async def bf_workload(b: Any) -> dict[str, Any]:
    """``bench/run.py``'s BF: the same measurement at a size that fits a bench run."""
    rows = 20_000 if b.sizes.drain <= 4_000 else 200_000
    return await bench(argparse.Namespace(rows=rows, baseline_seconds=3.0, paced=None), b.url)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        url, schema, rows, seconds = sys.argv[2:6]
        probe(url, schema, int(rows), float(seconds))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    parser.add_argument("--paced", type=int, default=None, help="also a pass capped at this many rows/s")
    args = parser.parse_args()
    result = asyncio.run(bench(args, os.environ["WORKHORSE_DATABASE_URL"]))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
