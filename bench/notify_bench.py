"""Enqueue commits per second with the wake (NOTIFY) on and off (issue 31, part 4).

    python bench/notify_bench.py [--clients 32] [--seconds 4] [--rounds 3]

``--clients`` concurrent single-job enqueuers, each on a connection of its own (one App whose pool
holds exactly that many), each ``enqueue`` its own transaction (the driver's autocommit single
enqueue), through the public API, in three modes of the same App: ``every`` (each enqueue wakes
inside its statement: workhorse before coalescing), ``coalesced`` (``drivers/wake_throttle.py``)
and ``off`` (no wake). Rounds alternate their order, on a migrated schema of their own (dropped at
the end), so the shared server's load falls on all alike.
Prints one JSON line per round and a summary line. ``--pickup`` adds the pickup latency of jobs
enqueued in bursts of 4 to an idle worker, every enqueue waking (window 0) vs coalesced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from typing import Any

import psycopg

from workhorse import App, JobContext
from workhorse.drivers.wake_throttle import WAKE_WINDOW

MODES = ("every", "coalesced", "off")
WINDOW = [WAKE_WINDOW]  # --window


def build(url: str, schema: str) -> tuple[App, Any]:
    app = App(url, schema=schema)

    @app.job(name="bench.notify", tenant="none")
    async def noop(ctx: JobContext, payload: Any) -> None:
        return None

    return app, noop


def switch(app: App, mode: str) -> None:
    """every: each enqueue wakes inline (before coalescing); coalesced: the driver's throttle;
    off: no wake at all (the plain insert, nothing owed)."""
    throttle: Any = app.driver._wakes  # type: ignore[attr-defined]
    throttle.window = 0.0 if mode == "every" else WINDOW[0]
    if mode == "off":
        throttle.lead = lambda queue: False
        throttle.owe = lambda queue: None
    else:
        throttle.__dict__.pop("lead", None)
        throttle.__dict__.pop("owe", None)


async def round_of(job: Any, clients: int, seconds: float) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * clients

    async def client(i: int) -> None:
        while time.monotonic() < stop:
            await job.enqueue({})
            counts[i] += 1

    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return sum(counts) / (time.monotonic() - started)


async def main_async(url: str, clients: int, seconds: float, rounds: int) -> None:
    os.environ["WORKHORSE_POOL_SIZE"] = str(clients)
    schema = f"bench_notify_{uuid.uuid4().hex[:8]}"
    await App(url, schema=schema).migrate()
    app, job = build(url, schema)
    try:
        for mode in MODES:  # warm: every connection open, each statement prepared
            switch(app, mode)
            await round_of(job, clients, 0.5)
        found: dict[str, list[float]] = {mode: [] for mode in MODES}
        for n in range(rounds):
            for mode in MODES if n % 2 == 0 else MODES[::-1]:
                switch(app, mode)
                rate = await round_of(job, clients, seconds)
                found[mode].append(rate)
                print(json.dumps({"round": n, "mode": mode, "commits_per_s": round(rate)}), flush=True)
        median = {mode: statistics.median(rates) for mode, rates in found.items()}
        cost = {mode: round(100 * (median["off"] - median[mode]) / median["off"], 1) for mode in MODES}
        print(
            json.dumps(
                {
                    "clients": clients,
                    "window_ms": WINDOW[0] * 1000,
                    "median": {m: round(r) for m, r in median.items()},
                    "cost_pct": cost,
                }
            )
        )
    finally:
        await app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]


async def pickup(url: str, window: float, bursts: int = 20) -> dict[str, float]:
    """ms from enqueue to start, for bursts of 4 back-to-back enqueues to an idle worker (the 2nd to
    4th fall inside the first's window, so their wake trails); ``window`` 0 wakes every enqueue."""
    schema = f"bench_pickup_{uuid.uuid4().hex[:8]}"
    app = App(url, schema=schema)
    await app.migrate()
    app.driver._wakes.window = window  # type: ignore[attr-defined]
    started: dict[int, float] = {}
    done = asyncio.Event()

    @app.job(name="bench.pickup", tenant="none")
    async def mark(ctx: JobContext, payload: dict[str, int]) -> None:
        started[payload["i"]] = time.monotonic()
        if len(started) % 4 == 0:
            done.set()

    worker = app.worker(handle_signals=False, poll_interval="2s", concurrency=10)
    run = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)
    sent: dict[int, float] = {}
    try:
        for k in range(bursts):
            await asyncio.sleep(0.2)
            done.clear()
            for j in range(4):
                sent[k * 4 + j] = time.monotonic()
                await mark.enqueue({"i": k * 4 + j})
            await asyncio.wait_for(done.wait(), 10)
    finally:
        await worker.stop()
        await run
        await app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]
    ms = sorted((started[i] - sent[i]) * 1000 for i in sent)
    return {"p50_ms": round(statistics.median(ms), 1), "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pickup", action="store_true", help="also: pickup latency in bursts, 0 vs the window")
    parser.add_argument("--window", type=float, default=WAKE_WINDOW * 1000, help="coalescing window, ms")
    args = parser.parse_args()
    WINDOW[0] = args.window / 1000
    url = os.environ.get("WORKHORSE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    asyncio.run(main_async(url, args.clients, args.seconds, args.rounds))
    if args.pickup:
        for window in (0.0, WINDOW[0], 0.0, WINDOW[0]):
            found = asyncio.run(pickup(url, window))
            print(json.dumps({"pickup_bursts_of_4": True, "window_ms": window * 1000, **found}), flush=True)


if __name__ == "__main__":
    main()
