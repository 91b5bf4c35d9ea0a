"""The app the benchmark's worker subprocesses run (`workhorse --app benchapp:app worker`).

Its database and schema come from the environment, set by ``bench/run.py``:
``WORKHORSE_BENCH_URL`` (else the usual resolution: ``WORKHORSE_DATABASE_URL``, else the embedded
server) and ``WORKHORSE_BENCH_SCHEMA``. Every job lives on one queue, ``bench``, so a worker's
``concurrency`` is exactly its number of slots. ``WORKHORSE_BENCH_PER_TENANT`` (W2cap, W5) sets
``app.limits = Limits(per_tenant=N)``: every worker of that process claims under the cap.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from workhorse import App, JobContext, Limits

QUEUE = "bench"

app = App(os.environ.get("WORKHORSE_BENCH_URL") or None, schema=os.environ.get("WORKHORSE_BENCH_SCHEMA", "workhorse"))
if os.environ.get("WORKHORSE_BENCH_PER_TENANT"):
    app.limits = Limits(per_tenant=int(os.environ["WORKHORSE_BENCH_PER_TENANT"]))


@app.job(name="bench.noop", queue=QUEUE, tenant="none")
async def noop(ctx: JobContext, payload: Any) -> None:
    """W1, W1b, W2: nothing at all, so the figure is the queue's own cost."""


@app.job(name="bench.latency", queue=QUEUE, tenant="none")
async def latency(ctx: JobContext, payload: dict[str, Any]) -> float:
    """W3: seconds from the producer's ``time.time()`` (taken before its enqueue) to this body starting.

    Returned as the job's result, read back afterwards with one query over the schema.
    """
    return time.time() - float(payload["t"])


@app.job(name="bench.org_noop", queue=QUEUE, tenant=lambda p: p["org"])
async def org_noop(ctx: JobContext, payload: Any) -> None:
    """W2cap: W2's no-op body, with a tenant per payload (``org``), so ``per_tenant`` counts it."""


@app.job(name="bench.org_sleep", queue=QUEUE, tenant=lambda p: p["org"])
async def org_sleep(ctx: JobContext, payload: Any) -> None:
    """W5: a 50 ms body with a tenant per payload."""
    await asyncio.sleep(0.05)
