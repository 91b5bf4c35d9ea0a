"""The Postgres side of ``app.wait`` (``workhorse.steps.results``): a LISTEN session on the settled channel.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import psycopg
from psycopg import sql

from workhorse._db.queries.jobs import SETTLED_CHANNEL_SUFFIX
from workhorse.drivers.pooler import listen_url
from workhorse.drivers.postgres_core import translated

log = logging.getLogger("workhorse.wait")


async def listen_settled(url: str, schema: str, job_id: str, woke: asyncio.Event) -> Callable[[], Awaitable[None]]:
    """Start listening; ``woke`` is set when a notify may name ``job_id``. Answers the closer.
    LISTEN is in place before this returns, so a settle after it is never missed. Behind a
    transaction pooler without ``WORKHORSE_LISTEN_URL`` nothing listens: the waiter's poll finds it."""
    direct = listen_url(url)
    if direct is None:
        return _nothing
    with translated():
        conn = await psycopg.AsyncConnection.connect(direct, autocommit=True, application_name="workhorse:wait")
        await conn.execute(sql.SQL("listen {}").format(sql.Identifier(schema + SETTLED_CHANNEL_SUFFIX)))

    async def read() -> None:
        try:
            async for note in conn.notifies():
                if not note.payload or job_id in note.payload.split(","):
                    woke.set()
        except psycopg.Error:  # the session went away: the waiter's poll still finds the job
            log.debug("the wait's LISTEN session ended", exc_info=True)

    task = asyncio.create_task(read(), name=f"wait:{job_id}")

    async def close() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await conn.close()

    return close


async def _nothing() -> None:
    return None
