"""Job dependencies against plain jobs, in one run on a fresh schema each (issue 32's measures).

    python bench/deps_bench.py [--jobs 10000] [--concurrency 10]

Reads ``WORKHORSE_DATABASE_URL``. Prints one JSON line: seconds per scenario and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from typing import Any

import psycopg

from workhorse import App, JobContext

URL = os.environ.get("WORKHORSE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


async def scenario(kind: str, jobs: int, concurrency: int) -> float:
    """Seconds from the worker's start to: the sink's start (fan-in), else the drain's end."""
    schema = f"deps_bench_{uuid.uuid4().hex[:8]}"
    app = App(URL, schema=schema)
    sink_started: list[float] = []

    @app.job(name="noop", tenant="none")
    async def noop(ctx: JobContext, payload: int) -> None:
        return None

    @app.job(name="sink", tenant="none")
    async def sink(ctx: JobContext, payload: None) -> None:
        sink_started.append(time.perf_counter())

    try:
        await app.migrate()
        if kind == "fan_in":
            refs = await noop.enqueue_many(list(range(jobs)))
            await sink.enqueue(None, after=refs)
        elif kind == "edges":  # half the jobs each wait on one of the other half
            parents = await noop.enqueue_many(list(range(jobs // 2)))
            for i in range(0, len(parents), 500):
                async with app.driver.connection() as conn, conn.transaction():  # type: ignore[attr-defined]
                    for ref in parents[i : i + 500]:
                        await noop.enqueue(0, after=[ref], conn=conn)
        else:
            await noop.enqueue_many(list(range(jobs)))
        started = time.perf_counter()
        await app.worker(concurrency=concurrency).run(burst=True)
        ended = time.perf_counter()
        return (sink_started[0] if sink_started else ended) - started
    finally:
        await app.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")  # type: ignore[arg-type]


async def main(jobs: int, concurrency: int) -> dict[str, Any]:
    out: dict[str, Any] = {"jobs": jobs, "concurrency": concurrency}
    for kind in ("plain", "fan_in", "plain_again", "edges"):
        out[kind] = round(await scenario(kind.removesuffix("_again"), jobs, concurrency), 3)
    plain = min(out["plain"], out["plain_again"])
    out["fan_in_ratio"] = round(out["fan_in"] / plain, 3)
    out["edges_ratio"] = round(out["edges"] / plain, 3)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.jobs, args.concurrency))), flush=True)
