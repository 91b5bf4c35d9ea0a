"""The outbox relay: moves the rows staged in source databases (``workhorse.outbox``) into the
queue, each row exactly one job.

One loop per source, each on one connection of its own to that source (``application_name``
``workhorse:relay``), LISTENing on the outbox channel. A pass, repeated while batches come back
full:

1. **claim** a batch of pending rows no relay holds (``CLAIM``: ``FOR UPDATE SKIP LOCKED``, then a
   lease, ``lease`` seconds on the source's clock): two relays never take one row at once, and the
   rows of a relay that died come back when its lease lapses;
2. **insert** them into the queue under their own ids (``ENQUEUE_STAGED``, one statement, its own
   transaction), conflicts on the id or on a live idempotency key doing nothing;
3. **mark** them published in the source (``MARK_PUBLISHED``), with each row's outcome.

A relay killed between 2 and 3 leaves rows the queue already received; whoever claims them after
the lease inserts nothing and marks them (outcome ``present``). The queue knows them by a tombstone
per staged id (``{schema}.outbox_received``, written by ``ENQUEUE_STAGED`` before the job), not by
the job, which may be finished and purged (or removed) by then. So every committed staged row
becomes exactly one job, and a rolled-back one never existed to be claimed.

Wake-ups: a stage's NOTIFY (sent at its COMMIT) wakes the loop at once; without one, the loop
claims again every ``poll_interval``, which is the guarantee (and, on a LISTEN session that died,
the probe that finds it dead). Retention: every ``purge_every`` the loop removes published rows
older than ``retention`` from its source, a bounded batch a statement; at the same cadence (once
for all the loops) the relay removes the queue's tombstones older than ``max(retention, 7 days)``,
so a tombstone outlives its published row, and a row left pending by a dead relay is still known
for at least a week. ``retention=None`` keeps both.

Shutdown, like the worker's two phases: the first SIGTERM or SIGINT (or ``stop()``) stops
claiming; a pass in flight finishes its batch (insert and mark), then every loop closes its
connection and ``run()`` returns its ``RelayStats``. A second signal cuts off at once: the batch
in flight, if any, comes back after its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from workhorse._service import Service, stop_signals
from workhorse.drivers import refusals
from workhorse.drivers.postgres_core import check_schema_name
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError, DatabaseError, SchemaError
from workhorse.outbox.source import OutboxSource, check_source
from workhorse.types import NewJob

if TYPE_CHECKING:
    from workhorse.app import App

log = logging.getLogger("workhorse.relay")

PURGE_BATCH = 500  # published rows (or tombstones) removed per statement
RECEIVED_MIN_AGE = 7 * 86400.0  # seconds a tombstone is kept at the least, whatever the retention
BACKOFF_FIRST = 0.5  # seconds before the first reconnect; doubled per failure, jittered, capped
BACKOFF_MAX = 10.0


class StagedQueue(Protocol):
    """What the relay needs of the queue's driver (``PostgresOutbox``)."""

    async def enqueue_staged(self, jobs: Sequence[NewJob]) -> list[str]: ...

    async def purge_received(self, age: float, batch: int) -> int: ...


@dataclass
class SourceStats:
    """What one source's loop did: rows claimed, and what each became."""

    source: str
    claimed: int = 0
    enqueued: int = 0
    present: int = 0
    duplicate: int = 0
    batches: int = 0
    purged: int = 0
    failures: int = 0  # passes that failed (a database unreachable) and were tried again


@dataclass
class RelayStats:
    """What ``run()`` answers, and ``workhorse relay --json`` prints at exit."""

    sources: list[SourceStats] = field(default_factory=list)
    received_purged: int = 0  # the queue's tombstones removed (outbox_received)

    def to_dict(self) -> dict[str, Any]:
        totals = {k: sum(getattr(s, k) for s in self.sources) for k in _COUNTS}
        return {**totals, "received_purged": self.received_purged, "sources": [asdict(s) for s in self.sources]}


_URL_PASSWORD = re.compile(r"(?P<head>://[^:/@]+:)[^@]*@")
_CONNINFO_PASSWORD = re.compile(r"password=\S*")


def redact(url: str) -> str:
    """A source URL as logs and stats show it: a password replaced by ***."""
    return _CONNINFO_PASSWORD.sub("password=***", _URL_PASSWORD.sub(r"\g<head>***@", url))


_COUNTS = ("claimed", "enqueued", "present", "duplicate", "batches", "purged", "failures")


class Relay:
    """Moves staged rows from each of ``sources`` (PostgreSQL URLs) into ``app``'s queue.

    ``batch`` rows a claim (500); ``lease`` how long a claimed batch is this relay's (30 s: a
    killed relay's rows come back after it); ``poll_interval`` between claims when no NOTIFY comes
    (15 s); ``retention`` how long published rows are kept as the audit trail (``7d``; None keeps
    them), purged every ``purge_every`` (1 h), and with them the queue's tombstones older than
    ``max(retention, 7 days)`` (``received_age``). ``handle_signals`` False leaves SIGTERM to the caller.
    """

    def __init__(
        self,
        app: App,
        sources: Sequence[str],
        *,
        batch: int = 500,
        lease: Duration = "30s",
        poll_interval: Duration = "15s",
        retention: Duration | None = "7d",
        purge_every: Duration = "1h",
        handle_signals: bool = True,
        relay_id: str | None = None,
    ) -> None:
        if isinstance(sources, str) or not sources or not all(isinstance(s, str) and s for s in sources):
            raise ConfigurationError(
                cause=f"relay expected a list of one or more source database URLs, got {sources!r}",
                fix="workhorse relay --source postgresql://app-db/app   # or: outbox.relay(['postgresql://...'])",
            )
        if len(set(sources)) != len(sources):
            raise ConfigurationError(
                cause="relay was given the same source URL twice", fix="name each source database once"
            )
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise ConfigurationError(
                cause=f"relay batch expected a whole number from 1 to 10000, got {batch!r}",
                fix="workhorse relay --batch 500",
            )
        self.app = app
        self.schema = check_schema_name(app.schema)
        self.sources = list(sources)
        self.batch = batch
        self.lease = to_seconds(lease, what="lease", allow_zero=False)
        self.poll_interval = to_seconds(poll_interval, what="poll_interval", allow_zero=False)
        self.retention = None if retention is None else to_seconds(retention, what="retention")
        # A tombstone outlives its published row: the row can no longer be claimed once purged.
        self.received_age = None if self.retention is None else max(self.retention, RECEIVED_MIN_AGE)
        self.purge_every = to_seconds(purge_every, what="purge_every", allow_zero=False)
        self.handle_signals = handle_signals
        self.id = relay_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stats = RelayStats([SourceStats(redact(url)) for url in self.sources])
        self._service = Service("relay", code="RELAY_RUNNING", fix="stop the running relay first: await relay.stop()")
        self._loops: list[asyncio.Task[None]] = []  # one per source, while run() runs
        self._queue_failures = 0  # batches the queue refused in a row (its backoff, shared by the loops)
        self._next_received_purge = 0.0  # monotonic: the queue's tombstones, once for all the loops

    def check_sources(self) -> None:
        """Connect to each source once, directly: DATABASE_UNAVAILABLE with PostgreSQL's reason, or
        OUTBOX_NOT_MIGRATED, before a relay starts (``workhorse relay`` calls it)."""
        for url in self.sources:
            check_source(url, self.schema, redact(url))

    # -- the run -------------------------------------------------------------------------------------

    async def run(self, *, burst: bool = False) -> RelayStats:
        """Relay until stopped (SIGTERM, SIGINT, ``stop()``); with ``burst``, until every source
        has nothing pending. Raises ``OUTBOX_NOT_MIGRATED`` when a source has no staging table, and
        the queue's refusal when its schema is missing or behind; rides out databases going away."""
        if self.app.is_memory:  # the memory driver is a test double: the outbox is PostgreSQL's alone
            raise refusals.postgres_only("the transactional outbox's relay")
        driver = self.app.driver
        with self._service.running():
            self._service.stopping.clear()
            self.stats = RelayStats([SourceStats(redact(url)) for url in self.sources])  # this run's
            self._next_received_purge = 0.0
            await driver.check_schema()
            with stop_signals(self._signalled, enabled=self.handle_signals):
                self._loops = loops = [
                    asyncio.create_task(self._source_loop(url, stats, burst), name=f"workhorse-relay {stats.source}")
                    for url, stats in zip(self.sources, self.stats.sources, strict=True)
                ]
                try:
                    await _first_fatal(loops)
                finally:
                    for task in loops:
                        task.cancel()
                    await asyncio.gather(*loops, return_exceptions=True)
                    self._loops = []
        return self.stats

    async def stop(self) -> None:
        """Stop claiming, finish the batch in flight, and return once ``run()`` has ended."""
        self._service.request_stop()
        await self._service.wait_stopped()

    def _signalled(self, sig: Any) -> None:
        if self._service.signalled() == 1:
            log.info("relay %s: %s received, finishing the batch in flight", self.id, getattr(sig, "name", sig))
            self._service.request_stop()
        else:
            log.warning("relay %s: second signal, stopping now (a batch in flight comes back after its lease)", self.id)
            for task in self._loops:
                task.cancel()

    @property
    def _stopping(self) -> bool:
        return self._service.stopping.is_set()

    # -- one source ------------------------------------------------------------------------------------

    async def _source_loop(self, url: str, stats: SourceStats, burst: bool) -> None:
        failures = 0
        source = OutboxSource(url, self.schema)
        while not self._stopping:
            try:
                await source.connect()
                failures = 0
                if await self._serve(source, stats, burst):
                    return
            except SchemaError:
                raise  # the staging table is missing: retrying cannot mend it
            except DatabaseError as error:
                failures += 1
                stats.failures += 1
                if burst and failures > 5:
                    raise
                delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)
                log.warning("relay %s: source %s failed (%s); again in %.1f s", self.id, stats.source, error, delay)
                await self._sleep(delay)
            finally:
                await source.close()

    async def _serve(self, source: OutboxSource, stats: SourceStats, burst: bool) -> bool:
        """Passes on one connection until stopped; answers True when the loop is done (stopped,
        or a burst run found nothing pending). A failed connection raises."""
        next_purge = time.monotonic()  # a relay purges as it starts, then every purge_every
        while not self._stopping:
            claimed = await self._move(source, stats)
            if claimed == self.batch:
                continue  # a full batch: more is likely waiting
            if self.retention is not None and time.monotonic() >= next_purge and not self._stopping:
                stats.purged += await self._purge(source)
                next_purge = time.monotonic() + self.purge_every
                await self._purge_received()
            if burst and claimed == 0:
                return True
            if claimed == 0:
                await source.wait(self.poll_interval, self._service.stopping)
        return True

    async def _move(self, source: OutboxSource, stats: SourceStats) -> int:
        """One batch: claim, enqueue in the queue, mark. Answers how many rows it claimed (-1:
        the queue refused the batch, handed back; claim again after a pause)."""
        jobs = await source.claim(self.batch, self.id, self.lease)
        if not jobs:
            return 0
        queue: StagedQueue = self.app.driver  # type: ignore[assignment]
        ids = [job.id for job in jobs]
        try:
            outcomes = await queue.enqueue_staged(jobs)
        except (DatabaseError, SchemaError) as error:
            stats.failures += 1
            self._queue_failures += 1
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self._queue_failures - 1)) * random.uniform(0.5, 1.0)
            log.warning(
                "relay %s: the queue refused a batch of %d (%s); handed back, again in %.1f s",
                self.id, len(jobs), error, delay,
            )  # fmt: skip
            await source.release(ids, self.id)
            await self._sleep(delay)
            return -1
        self._queue_failures = 0
        await source.mark(ids, outcomes)
        stats.batches += 1
        stats.claimed += len(jobs)
        for outcome in outcomes:
            setattr(stats, outcome, getattr(stats, outcome) + 1)
        return len(jobs)

    async def _purge(self, source: OutboxSource) -> int:
        assert self.retention is not None
        removed = 0
        while not self._stopping:
            batch = await source.purge(self.retention, PURGE_BATCH)
            removed += batch
            if batch < PURGE_BATCH:
                break
        return removed

    async def _purge_received(self) -> None:
        """The queue's tombstones older than ``received_age``, in bounded batches, when it is time
        (the first loop to get there purges for all). A queue that fails is tried at the next
        cadence: the tombstones only wait longer."""
        if self.received_age is None or time.monotonic() < self._next_received_purge:
            return
        self._next_received_purge = time.monotonic() + self.purge_every
        queue: StagedQueue = self.app.driver  # type: ignore[assignment]
        while not self._stopping:
            try:
                batch = await queue.purge_received(self.received_age, PURGE_BATCH)
            except (DatabaseError, SchemaError) as error:
                log.warning("relay %s: purging the queue's outbox tombstones failed (%s)", self.id, error)
                return
            self.stats.received_purged += batch
            if batch < PURGE_BATCH:
                return

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._service.stopping.wait(), seconds)


async def _first_fatal(loops: list[asyncio.Task[None]]) -> None:
    """Wait for every loop; the first that failed for good ends them all with its refusal."""
    pending = set(loops)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.cancelled():  # a second signal
                continue
            error = task.exception()
            if error is not None:
                raise error
