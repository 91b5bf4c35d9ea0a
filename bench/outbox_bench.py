"""The transactional outbox's workloads of ``bench/run.py`` (OB1, OB2), beside a plain enqueue.

The source is a database of its own on the same server (``workhorse_bench_src_<hex>``, created
and dropped here); the queue is the run's workhorse schema.

OB1  Staged-to-queued latency on an idle relay (`workhorse relay` in a subprocess, woken by the
     stage's NOTIFY): one job staged every 20 ms on an autocommit connection (one statement, one
     transaction), for the run's latency window after a warm-up. Latency = the job's ``created_at``
     (the queue's insert) minus the staged row's ``staged_at`` (the stage), both the one server's
     clock. Beside it, in the same loop: the time a plain ``await job.enqueue(p)`` takes to return,
     which is when a plain job is queued.
OB2  A relay's rows/s on a backlog of 100,000 staged rows (``Relay(...).run(burst=True)`` in this
     process, batches of 500, timed from the call to its return), beside ``enqueue_many`` of the
     same 100,000 payloads in calls of 500 (each a round trip and a commit, as a relay batch is).
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from typing import Any

import psycopg

from workhorse import App, Outbox
from workhorse.outbox.relay import Relay

BACKLOG = 100_000
BATCH = 500
STAGE_CHUNK = 5_000
EVERY = 0.020


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list, as run.py's."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def log(b: Any, message: str) -> None:
    b.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", highlight=False)


def _ms(seconds: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in seconds]
    if not ms:
        raise RuntimeError("no latency samples were recorded")
    return {
        "samples": len(ms),
        "p50_ms": round(_percentile(ms, 50), 3),
        "p99_ms": round(_percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3),
    }


def _with_dbname(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


async def outbox(b: Any) -> dict[str, Any]:
    app: App = b.jobs.app
    noop = b.jobs.noop
    name = f"workhorse_bench_src_{secrets.token_hex(4)}"
    await b.run(f"create database {name}")
    source = _with_dbname(b.url, name)
    box = Outbox(app)
    try:
        async with await psycopg.AsyncConnection.connect(source, autocommit=True) as conn:
            await box.migrate(conn)
        latency = await _latency(b, app, box, noop, source)
        throughput = await _throughput(b, app, box, noop, source)
    finally:
        await b.run("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        await b.run(f"drop database if exists {name}")
    return {"title": "transactional outbox", **latency, **throughput}


async def _latency(b: Any, app: App, box: Outbox, noop: Any, source: str) -> dict[str, Any]:
    await b.truncate(b.wh)
    log(b, "OB1: `workhorse relay` idle on its source; one stage (and one plain enqueue) every 20 ms")
    relay = await b.spawn(
        "ob1-relay", "-m", "workhorse", "--database-url", b.url, "--schema", b.wh, "relay", "--source", source,
        env=b.env(), pipe_stdout=False,
    )  # fmt: skip
    enqueue_seconds: list[float] = []
    staged_ids: list[str] = []
    try:
        await b.wait_until(
            f"select count(*) from pg_stat_activity where application_name = 'workhorse:relay' "
            f"and datname = '{psycopg.conninfo.conninfo_to_dict(source)['dbname']}'",
            1,
            60,
            "the relay to listen",
        )
        async with await psycopg.AsyncConnection.connect(source, autocommit=True) as conn:
            for seconds, warm in ((b.sizes.warmup_seconds, True), (b.sizes.latency_seconds, False)):
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    ref = await box.stage(conn, noop, {"warm": warm})
                    started = time.perf_counter()
                    await noop.enqueue({"plain": True})
                    if not warm:
                        staged_ids.append(ref.id)
                        enqueue_seconds.append(time.perf_counter() - started)
                    await asyncio.sleep(EVERY)
        await b.wait_until(
            f"select count(*) from {b.wh}.jobs where payload ? 'warm' and not (payload->>'warm')::boolean",
            len(staged_ids),
            60,
            "the relay to move every staged job",
        )
    finally:
        await b.stop(relay)
    staged_at: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(source) as conn:
        cur = await conn.execute(
            f"select id::text, staged_at from {b.wh}.outbox where id = any(%s::uuid[])",  # type: ignore[arg-type]
            (staged_ids,),
        )
        staged_at = dict(await cur.fetchall())  # type: ignore[arg-type]
    cur = await b.admin.execute(
        f"select id::text, created_at from {b.wh}.jobs where id = any(%s::uuid[])",  # type: ignore[arg-type]
        (staged_ids,),
    )
    waits = [(created - staged_at[job_id]).total_seconds() for job_id, created in await cur.fetchall()]
    return {
        "OB1": {
            "what": "staged_at (the stage statement) -> created_at (the relay's insert in the queue), one server clock",
            "relay": _ms(waits),
            "plain_enqueue": {**_ms(enqueue_seconds), "what": "await job.enqueue(p) returning: the job is queued"},
        }
    }


async def _throughput(b: Any, app: App, box: Outbox, noop: Any, source: str) -> dict[str, Any]:
    await b.truncate(b.wh)
    log(b, f"OB2: staging a backlog of {BACKLOG:,} rows")
    async with await psycopg.AsyncConnection.connect(source) as conn:
        for start in range(0, BACKLOG, STAGE_CHUNK):
            await box.stage_many(conn, noop, [{"n": i} for i in range(start, start + STAGE_CHUNK)])
            await conn.commit()
        await conn.set_autocommit(True)
        await conn.execute(f"vacuum analyze {b.wh}.outbox")  # type: ignore[arg-type]
    log(b, f"OB2: one relay moving {BACKLOG:,} rows in batches of {BATCH}")
    relay = Relay(app, [source], batch=BATCH, handle_signals=False)
    started = time.perf_counter()
    await relay.run(burst=True)
    relay_seconds = time.perf_counter() - started
    stats = relay.stats.to_dict()
    if stats["enqueued"] != BACKLOG:
        raise RuntimeError(f"the relay moved {stats['enqueued']} of {BACKLOG} rows: {stats}")
    await b.truncate(b.wh)
    log(b, f"OB2: beside it, enqueue_many of {BACKLOG:,} payloads in calls of {BATCH}")
    payloads = [{"n": i} for i in range(BACKLOG)]
    started = time.perf_counter()
    for start in range(0, BACKLOG, BATCH):
        await noop.enqueue_many(payloads[start : start + BATCH])
    plain_seconds = time.perf_counter() - started
    relay_rate, plain_rate = BACKLOG / relay_seconds, BACKLOG / plain_seconds
    return {
        "OB2": {
            "relay": {"rows": BACKLOG, "batch": BATCH, "seconds": round(relay_seconds, 3),
                      "rows_per_s": round(relay_rate, 1)},
            "plain_enqueue_many": {"rows": BACKLOG, "batch": BATCH, "seconds": round(plain_seconds, 3),
                                   "rows_per_s": round(plain_rate, 1)},
            "ratio": round(relay_rate / plain_rate, 3),
        }
    }  # fmt: skip


def brief(r: dict[str, Any]) -> str:
    one, two = r["OB1"], r["OB2"]
    return (
        f"staged->queued p50 {one['relay']['p50_ms']:.2f} / p99 {one['relay']['p99_ms']:.2f} ms; "
        f"relay {two['relay']['rows_per_s']:,.0f} rows/s vs enqueue_many {two['plain_enqueue_many']['rows_per_s']:,.0f}"
    )


def rows(r: dict[str, Any]) -> list[tuple[str, ...]]:
    """Rows of run.py's table: workload, workhorse, beside it, ratio, and three blank columns."""
    one, two = r["OB1"], r["OB2"]
    relay, plain = one["relay"], one["plain_enqueue"]
    return [
        (
            f"OB1 staged->queued, idle relay (n={relay['samples']})",
            f"p50 {relay['p50_ms']:.2f} / p99 {relay['p99_ms']:.2f} ms",
            f"plain enqueue p50 {plain['p50_ms']:.2f} / p99 {plain['p99_ms']:.2f} ms",
            f"{relay['p50_ms'] / plain['p50_ms']:.2f}x / {relay['p99_ms'] / plain['p99_ms']:.2f}x",
            "", "", "",
        ),
        (
            f"OB2 relay, {two['relay']['rows']:,}-row backlog",
            f"{two['relay']['rows_per_s']:,.0f} rows/s",
            f"enqueue_many x{two['plain_enqueue_many']['batch']}: "
            f"{two['plain_enqueue_many']['rows_per_s']:,.0f} rows/s",
            f"{two['ratio']:.2f}x",
            "", "", "",
        ),
    ]  # fmt: skip
