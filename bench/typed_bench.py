"""Typed-payload workloads of ``bench/run.py`` (W1t, W1bt): what validating a payload costs at enqueue.

W1t   W1's sequential ``await job.enqueue(p)`` with the payload a pydantic v2 model (the body is
      annotated ``payload: Small``), beside the same calls with W1's dict payload on an untyped body;
      the sides alternate in rounds, each reports its median round. Same app, schema and connection pool.
W1bt  W1b's one ``enqueue_many`` call of N model payloads beside N dict payloads, alternating rounds.
The baseline here is workhorse itself: the ratio is the typed side over the dict side.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pydantic import BaseModel

from workhorse import App, JobContext

QUEUE = "bench"


class Small(BaseModel):
    """W1's payload, as a model."""

    n: int
    to: str


def declare(app: App) -> tuple[Any, Any]:
    @app.job(name="bench.typed_noop", queue=QUEUE, tenant="none")
    async def typed_noop(ctx: JobContext, payload: Small) -> None:
        """The model side: the payload is validated and dumped at enqueue."""

    @app.job(name="bench.dict_noop", queue=QUEUE, tenant="none")
    async def dict_noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        """The dict side: W1's path."""

    return typed_noop, dict_noop


def _result(title: str, per: int, typed: list[float], plain: list[float]) -> dict[str, Any]:
    t, d = statistics.median(typed), statistics.median(plain)
    return {
        "title": title,
        "unit": "jobs/s",
        "workhorse": {"jobs": per, "jobs_per_s": round(per / t, 1), "rounds_s": [round(x, 4) for x in typed],
                      "what": "pydantic model payloads"},
        "baseline": {"jobs": per, "jobs_per_s": round(per / d, 1), "rounds_s": [round(x, 4) for x in plain],
                     "what": "dict payloads, untyped body (W1's path)"},
        "ratio": round(d / t, 3),
        "target": "measured, no target",
        "pass": True,
    }  # fmt: skip


async def w1t(b: Any) -> dict[str, Any]:
    n = b.sizes.enqueue
    rounds = max(b.sizes.rounds, 3)
    per = max(1, n // rounds)
    async with App(b.url, schema=b.wh) as app:
        typed_noop, dict_noop = declare(app)
        for i in range(200):  # warm both paths and the pool
            await typed_noop.enqueue(Small(n=i, to="user@example.com"))
            await dict_noop.enqueue({"n": i, "to": "user@example.com"})
        await b.truncate(b.wh)
        typed: list[float] = []
        plain: list[float] = []
        for _ in range(rounds):
            models = [Small(n=i, to="user@example.com") for i in range(per)]
            started = time.perf_counter()
            for m in models:
                await typed_noop.enqueue(m)
            typed.append(time.perf_counter() - started)
            dicts = [{"n": i, "to": "user@example.com"} for i in range(per)]
            started = time.perf_counter()
            for p in dicts:
                await dict_noop.enqueue(p)
            plain.append(time.perf_counter() - started)
        assert await b.scalar(f"select count(*) from {b.wh}.jobs") == 2 * per * rounds
    await b.truncate(b.wh)
    return _result("single enqueue, model vs dict payload", per, typed, plain)


async def w1bt(b: Any) -> dict[str, Any]:
    n = b.sizes.enqueue_many
    rounds = max(b.sizes.rounds, 3)
    async with App(b.url, schema=b.wh) as app:
        typed_noop, dict_noop = declare(app)
        await typed_noop.enqueue_many([Small(n=i, to="user@example.com") for i in range(200)])
        await dict_noop.enqueue_many([{"n": i, "to": "user@example.com"} for i in range(200)])
        typed: list[float] = []
        plain: list[float] = []
        for _ in range(rounds):
            await b.truncate(b.wh)
            models = [Small(n=i, to="user@example.com") for i in range(n)]
            started = time.perf_counter()
            assert len(await typed_noop.enqueue_many(models)) == n
            typed.append(time.perf_counter() - started)
            await b.truncate(b.wh)
            dicts = [{"n": i, "to": "user@example.com"} for i in range(n)]
            started = time.perf_counter()
            assert len(await dict_noop.enqueue_many(dicts)) == n
            plain.append(time.perf_counter() - started)
    await b.truncate(b.wh)
    return _result("enqueue_many, model vs dict payloads", n, typed, plain)
