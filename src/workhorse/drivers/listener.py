"""The Postgres driver's wake-ups: one ``LISTEN`` session that turns "another process enqueued"
into a wake-up (``drivers.base.Wakeups``; ``PostgresDriver.open_wakeups`` opens one per worker).
NOTIFY is a hint; polling is the guarantee.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence

import psycopg
from psycopg import sql

from workhorse._db.queries.jobs import WAKE_BEAT, WAKE_SWEEP

log = logging.getLogger("workhorse.listener")


class Listener:
    def __init__(
        self,
        url: str | None,
        channel: str,
        queues: Sequence[str],
        wake: asyncio.Event,
        *,
        probe_interval: float = 60.0,
        probe_timeout: float = 5.0,
        beat: asyncio.Event | None = None,
    ) -> None:
        self.url = url
        self.channel = channel
        self.queues = frozenset(queues)
        self.wake = wake
        self.beat = beat  # set when a job of our queues was cancelled: renew the leases now
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.healthy = False
        self.reconnects = 0
        self.due = False  # a notify said a job of one of our queues is due now
        self.sweep = True  # a notify (or a reconnect) said a due time changed: run the full claim
        self._task: asyncio.Task[None] | None = None

    tells_due = True  # a notify names what it announces: a job due now, or a changed due time

    def start(self) -> None:
        """Listen, unless there is nowhere to (``url`` None: behind a transaction pooler without
        ``WORKHORSE_LISTEN_URL``); then it stays unhealthy and its owner polls."""
        if self.url is None:
            return
        self._task = asyncio.create_task(self._run(), name="listen")

    def take(self) -> tuple[bool, bool]:
        said = self.due, self.sweep
        self.due = self.sweep = False
        return said

    def pending(self) -> bool:
        return self.due or self.sweep

    def missed(self) -> None:
        self.sweep = True

    async def close(self) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._session()
            except (psycopg.Error, OSError, TimeoutError) as error:
                self.healthy = False
                failures += 1
                self.reconnects += 1
                delay = min(30.0, 0.25 * 2 ** min(failures, 7)) * random.uniform(0.5, 1.0)
                log.warning(
                    "listen connection lost (%s); polling meanwhile, reconnecting in %.1fs",
                    str(error).strip() or type(error).__name__,
                    delay,
                )
                self.sweep = True
                self.wake.set()  # a notify may have been missed while we were down
                await asyncio.sleep(delay)
            else:
                failures = 0

    async def _session(self) -> None:
        assert self.url is not None  # start() runs no session without one
        conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name="workhorse:listen", connect_timeout=10
        )
        try:
            await conn.execute(sql.SQL("listen {}").format(sql.Identifier(self.channel)))
            await self._probe(conn)
            self.healthy = True
            self.sweep = True
            self.wake.set()  # anything enqueued while we were connecting
            while True:
                async for notify in conn.notifies(timeout=self.probe_interval):
                    payload = notify.payload
                    if not payload or (payload.startswith(WAKE_SWEEP) and payload[len(WAKE_SWEEP) :] in self.queues):
                        self.sweep = True
                        self.wake.set()
                    elif payload.startswith(WAKE_BEAT) and payload[len(WAKE_BEAT) :] in self.queues:
                        if self.beat is not None:
                            self.beat.set()
                    elif payload in self.queues:
                        self.due = True
                        self.wake.set()
                        await asyncio.sleep(0)  # let the claim go out before this loop waits again
                await self._probe(conn)
        finally:
            self.healthy = False
            with contextlib.suppress(Exception):
                await conn.close()

    async def _probe(self, conn: psycopg.AsyncConnection[object]) -> None:
        """Same-session proof that the LISTEN is still in place, or an error within probe_timeout.

        A probe that gets no answer is not cancelled the usual way: psycopg would send the server
        a cancel request and then wait up to 5 s more for the query to end, on a session that is
        already known to be deaf. The connection is closed first, so the cancellation finds
        nothing to cancel and the rebuild starts at once."""
        probe = asyncio.ensure_future(self._channels(conn))
        try:
            await asyncio.wait({probe}, timeout=self.probe_timeout)
        finally:
            if not probe.done():  # no answer in time, or the listener is being stopped
                await conn.close()
                probe.cancel()
                await asyncio.wait({probe})
                if not probe.cancelled():
                    probe.exception()  # retrieved: the connection was closed under it
        if probe.cancelled():
            raise psycopg.OperationalError(
                f"the LISTEN session did not answer its probe within {self.probe_timeout:g}s"
            )
        channels = probe.result()
        if self.channel not in channels:
            raise psycopg.OperationalError("the LISTEN session lost its channel (a pooler in between?)")

    @staticmethod
    async def _channels(conn: psycopg.AsyncConnection[object]) -> set[str]:
        cur = await conn.execute("select pg_listening_channels()")
        return {row[0] for row in await cur.fetchall()}  # type: ignore[index]
