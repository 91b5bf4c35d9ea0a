"""The single enqueue's wake is coalesced: at most one per queue per window, the rest trailing
(``drivers/wake_throttle.py``, issue 31 part 4)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from workhorse import App, JobContext
from workhorse.drivers.postgres_core import jobs_channel


def declare(app: App) -> Any:
    @app.job(name="coalesced", tenant="none")
    async def coalesced(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    return coalesced


async def _heard(database_url: str, schema: str, during: Any, seconds: float) -> list[tuple[float, str]]:
    """Wakes on the schema's jobs channel while ``during`` runs and ``seconds`` after it: (when, payload)."""
    heard: list[tuple[float, str]] = []
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(f'listen "{jobs_channel(schema)}"')  # type: ignore[arg-type]

        async def read() -> None:
            async for note in conn.notifies():
                heard.append((time.monotonic(), note.payload))

        reader = asyncio.create_task(read())
        await during()
        await asyncio.sleep(seconds)
        reader.cancel()
    return heard


async def test_a_burst_of_single_enqueues_sends_few_wakes(pg_app: App, database_url: str) -> None:
    job = declare(pg_app)

    async def burst() -> None:
        await asyncio.gather(*(job.enqueue({"n": i}) for i in range(120)))

    heard = await _heard(database_url, pg_app.schema, burst, 0.2)
    assert 1 <= len(heard) < 60, len(heard)  # one per enqueue before coalescing
    assert {payload for _, payload in heard} == {"default"}


async def test_an_enqueue_inside_the_window_gets_a_trailing_wake(pg_app: App, database_url: str) -> None:
    job = declare(pg_app)
    pg_app.driver._wakes.window = 0.3  # type: ignore[attr-defined]
    marks: list[float] = []

    async def two() -> None:
        await job.enqueue({"n": 1})  # wakes inline
        await job.enqueue({"n": 2})  # inside the window: quiet, its wake trails
        marks.append(time.monotonic())

    heard = await _heard(database_url, pg_app.schema, two, 0.6)
    assert len(heard) == 2
    assert heard[1][0] - marks[0] > 0.15  # the trailing one, at the window's end
