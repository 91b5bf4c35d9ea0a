"""The arrivals: a thread of its own, with its own event loop and its own session (``soak-enqueue``,
never terminated by the chaos), that enqueues each planned batch at its time.

A batch is enqueued with the public API inside the soak's own transaction
(``job.enqueue_many(payloads, conn=conn)``), and the same transaction records every new job id
in ``soak_enqueued``. So the jobs that exist are exactly the ones recorded, whatever happens to the
commit's answer: when a server restart loses it, the retry first asks whether the batch landed.
A batch that could not be enqueued for 90 s is given up (counted in ``enqueue_failed``; those
jobs never existed, so they are not lost).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import psycopg

from soak import sql
from soak.events import Clock
from soak.plan import Arrival, JobSpec
from soak.soakapp import SoakApp, pauses
from workhorse.errors import WorkhorseError

log = logging.getLogger("soak")

BATCH_DEADLINE = 90.0
_FAILURES = (psycopg.OperationalError, psycopg.InterfaceError, WorkhorseError)


class Enqueuer(threading.Thread):
    def __init__(self, soak: SoakApp, url: str, arrivals: tuple[Arrival, ...], clock: Clock) -> None:
        super().__init__(name="soak-enqueue", daemon=True)
        self.soak = soak
        self.url = url
        self.arrivals = arrivals
        self.clock = clock
        self.t0 = time.monotonic()
        self.halt = threading.Event()
        self.finished = threading.Event()
        self.enqueued = 0
        self.failed_batches: list[int] = []
        self.landed: dict[int, float] = {}  # batch -> server time its commit was seen
        self._landed = threading.Condition()
        self._conn: psycopg.AsyncConnection[Any] | None = None

    def start_at(self, t0: float) -> None:
        self.t0 = t0
        self.start()

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self.finished.set()

    def wait_landed(self, batch: int, timeout: float) -> float | None:
        """The server time batch ``batch`` landed, waiting up to ``timeout`` for it."""
        with self._landed:
            self._landed.wait_for(lambda: batch in self.landed or self.finished.is_set(), timeout)
            return self.landed.get(batch)

    async def _main(self) -> None:
        try:
            for arrival in self.arrivals:
                await self._pause_until(self.t0 + arrival.at)
                if self.halt.is_set():
                    return
                await self._land(arrival)
        finally:
            if self._conn is not None:
                await self._conn.close()
            await self.soak.app.close()

    async def _pause_until(self, at: float) -> None:
        while not self.halt.is_set() and (left := at - time.monotonic()) > 0:  # noqa: ASYNC110 - a thread's Event
            await asyncio.sleep(min(left, 0.2))

    async def _land(self, arrival: Arrival) -> None:
        tried = False
        for pause in pauses(time.monotonic() + BATCH_DEADLINE):
            try:
                conn = await self._connection()
                if not tried or not await self._already(conn, arrival.batch):
                    await self._enqueue(conn, arrival)
            except _FAILURES as error:
                tried = True
                log.debug("enqueue of batch %d failed (%s); retrying", arrival.batch, error)
                await self._drop()
                await asyncio.sleep(pause)
            else:
                self._record(arrival)
                return
        log.warning("batch %d (%s, %d jobs) not enqueued; given up", arrival.batch, arrival.source, len(arrival.jobs))
        self.failed_batches.append(arrival.batch)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                application_name="soak-enqueue",
                connect_timeout=5,
                options=sql.DURABLE_SESSION,  # an enqueue acknowledged is an enqueue that survives a restart
            )
        return self._conn

    async def _drop(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _already(self, conn: psycopg.AsyncConnection[Any], batch: int) -> bool:
        row = await (await conn.execute(sql.q(sql.BATCH_LANDED, self.soak.app.schema), {"batch": batch})).fetchone()
        return bool(row and row[0])

    async def _enqueue(self, conn: psycopg.AsyncConnection[Any], arrival: Arrival) -> None:
        ids: list[str] = []
        specs: list[JobSpec] = []
        async with conn.transaction():
            for handle, body in self.soak.handles():
                chosen = [s for s in arrival.jobs if s.body == body]
                if chosen:
                    refs = await handle.enqueue_many([s.payload() for s in chosen], conn=conn)
                    ids += [r.id for r in refs]
                    specs += chosen
            await conn.execute(sql.q(sql.RECORD_ENQUEUED, self.soak.app.schema), _recorded(arrival, ids, specs))

    def _record(self, arrival: Arrival) -> None:
        with self._landed:
            self.landed[arrival.batch] = self.clock.now()
            self.enqueued += len(arrival.jobs)
            self._landed.notify_all()


def _recorded(arrival: Arrival, ids: list[str], specs: list[JobSpec]) -> dict[str, Any]:
    return {
        "batch": arrival.batch,
        "source": arrival.source,
        "ids": ids,
        "ns": [s.n for s in specs],
        "bodies": [s.body for s in specs],
        "ms": [s.ms for s in specs],
        "fails": [s.fail for s in specs],
    }
