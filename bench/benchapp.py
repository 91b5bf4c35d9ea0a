"""The app the benchmark's worker subprocesses run (`workhorse --app benchapp:app worker`).

Its database and schema come from the environment, set by ``bench/run.py``:
``WORKHORSE_BENCH_URL`` (else the usual resolution: ``WORKHORSE_DATABASE_URL``, else the embedded
server) and ``WORKHORSE_BENCH_SCHEMA``. Both jobs live on one queue, ``bench``, so a worker's
``concurrency`` is exactly its number of slots.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workhorse import App, JobContext

QUEUE = "bench"

app = App(os.environ.get("WORKHORSE_BENCH_URL") or None, schema=os.environ.get("WORKHORSE_BENCH_SCHEMA", "workhorse"))


@app.job(name="bench.noop", queue=QUEUE, tenant="none")
async def noop(ctx: JobContext, payload: Any) -> None:
    """W1, W1b, W2: nothing at all, so the figure is the queue's own cost."""


@app.job(name="bench.latency", queue=QUEUE, tenant="none")
async def latency(ctx: JobContext, payload: dict[str, Any]) -> float:
    """W3: seconds from the producer's ``time.time()`` (taken before its enqueue) to this body starting.

    Returned as the job's result, read back afterwards with one query over the schema.
    """
    return time.time() - float(payload["t"])
