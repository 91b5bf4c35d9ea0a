"""The scheduler role's lifecycle: ``Scheduler`` runs rounds, one at a time, until stopped.

Design: docs/guides/cron.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from workhorse._service import Service, stop_signals
from workhorse.drivers import refusals
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError, WorkhorseError
from workhorse.leader.cron import CronDuty
from workhorse.leader.duty import Duty
from workhorse.leader.election import Election
from workhorse.leader.folds import CounterFolds, fold_hourly
from workhorse.leader.purge import RetentionPurge, purge_every
from workhorse.leader.rescue import LeaseRescue
from workhorse.leader.rounds import Handover, RoundRequest
from workhorse.leader.stats import SchedulerStats
from workhorse.leader.store import HandoverSource, RoundStore, open_store
from workhorse.leader.tasks import TaskHandle
from workhorse.leader.vacuum import VacuumDuty, vacuum_every, vacuum_setting

if TYPE_CHECKING:
    from workhorse.app import App

log = logging.getLogger("workhorse.scheduler")

RESCUE_ROUNDS = 4  # the leader rescues lapsed leases every this many rounds (workhorse.leader.rescue)


@dataclass
class _Anchor:
    db_now: datetime
    mono: float


class Scheduler:
    """Runs the scheduler role for ``app``'s tasks. ``await run()`` until ``stop()`` or a signal.

    ``lease``: how long a leadership lasts without renewal (a crashed leader is replaced within
    it); ``interval``: the longest gap between two rounds, at most half the lease. ``vacuum``:
    whether the leader vacuums the schema's tables past their dead-row threshold (None:
    ``WORKHORSE_VACUUM``, on when unset; ``workhorse.leader.vacuum``).
    ``store``/``clock``/``waiter`` are seams for tests (a store of rounds, a monotonic clock, and
    an awaitable sleep); by default the app's driver (on PostgreSQL, a connection of its own),
    ``time.monotonic`` and a wakeable sleep.
    """

    def __init__(
        self,
        app: App,
        *,
        lease: Duration = "30s",
        interval: Duration = "15s",
        handle_signals: bool = True,
        vacuum: bool | None = None,
        store: RoundStore | None = None,
        clock: Callable[[], float] | None = None,
        waiter: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.lease = to_seconds(lease, what="lease", allow_zero=False)
        self.interval = to_seconds(interval, what="interval", allow_zero=False)
        if self.lease < 2:
            raise ConfigurationError(
                cause=f"the scheduler lease must be at least 2s (a shorter one lapses between rounds), got {lease!r}",
                fix="Scheduler(app, lease='30s')",
            )
        if self.interval > self.lease / 2:
            raise ConfigurationError(
                cause=f"the scheduler interval ({self.interval:g}s) must be at most half its lease "
                f"({self.lease:g}s), so the lease is renewed before it can lapse",
                fix="Scheduler(app, lease='30s', interval='15s')",
            )
        self.handle_signals = handle_signals
        self.vacuum = vacuum_setting(vacuum)
        self.id = f"s-{uuid.uuid4().hex[:16]}"  # a fresh incarnation per process, never the hostname
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.stats = SchedulerStats()
        self._store = store
        self._clock = clock or time.monotonic
        self._waiter = waiter
        self._election = Election(self.id, self.stats)
        self._cron = CronDuty(self.id, app.tasks, self.stats)
        self._purge = RetentionPurge(self.id, lambda: app.retention, app.admin)
        self._rescue = LeaseRescue(self.id, every=RESCUE_ROUNDS * self.interval, jobs=app.jobs, hooks=app.hooks)
        self._vacuum = VacuumDuty(self.id, lambda: None if app.is_memory else app.driver, enabled=self.vacuum)
        self._duties: list[Duty] = [CounterFolds(self.id), self._purge, self._rescue, self._vacuum]
        self._anchor: _Anchor | None = None
        self._wake = asyncio.Event()
        self._service = Service("scheduler", code="SCHEDULER_RUNNING", fix="create a second Scheduler(app) instead")
        self._handover: Handover | None = None

    @property
    def tasks(self) -> Mapping[str, TaskHandle[Any]]:
        return self.app.tasks

    @property
    def leading(self) -> bool:
        """Whether the last round left this process holding the lease."""
        return self._election.leading

    @property
    def epoch(self) -> int | None:
        return self._election.epoch

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> SchedulerStats:
        """Run rounds until ``stop()`` (or SIGTERM/SIGINT): then finish the round and release the lease."""
        if self._store is None and self.app.is_memory:  # the test double keeps no cron leadership
            raise refusals.postgres_only("cron leadership (the scheduler role)")
        with self._service.running(), stop_signals(self._on_signal, enabled=self.handle_signals):
            if not self.tasks:
                log.info("scheduler %s: no task is declared on this app; the role stays idle", self.id)
                await asyncio.gather(
                    fold_hourly(self.id, self.app.driver.rollup_counters, self._service.stopping),
                    purge_every(self.id, lambda: self.app.retention, self.app.admin, self._service.stopping),
                    vacuum_every(self._vacuum, self._service.stopping),
                )
                return self.stats
            store = self._store if self._store is not None else open_store(self.app)
            try:
                await store.check_schema()
                log.info(
                    "scheduler %s: standing for election (lease %gs, round every %gs) with %d task(s): %s",
                    self.id,
                    self.lease,
                    self.interval,
                    len(self.tasks),
                    ", ".join(sorted(self.tasks)),
                )
                await self._loop(store)
            finally:
                await self._purge.close()
                await self._vacuum.close()
                await self._step_down(store)
                await self._stop_listening()
                if self._store is None:
                    await store.close()
        return self.stats

    async def stop(self) -> None:
        """Finish the round in flight, release the lease, and return once ``run()`` has ended."""
        self._service.request_stop()
        self._wake.set()
        await self._service.wait_stopped()

    def _on_signal(self, sig: signal.Signals) -> None:
        first = self._service.signalled() == 1
        log.warning(
            "scheduler %s: %s received, %s",
            self.id,
            sig.name,
            "finishing the round, then releasing the lease" if first else "still finishing the round",
        )
        self._service.request_stop()
        self._wake.set()

    # -- rounds -------------------------------------------------------------------------------

    async def _loop(self, store: RoundStore) -> None:
        failures = 0
        while not self._service.stopping.is_set():
            self._wake.clear()
            try:
                wait = await self._round(store)
                failures = 0
                if self.leading and self._anchor is not None:
                    for duty in self._duties:
                        await duty.after_round(store, self._anchor.db_now)
            except WorkhorseError as error:
                failures += 1
                self.stats.failed_rounds += 1
                if self._election.lapse_if_silent(self._clock()):
                    self._cron.forget()
                wait = min(self.interval, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                log.warning("scheduler %s: round failed (%s); next try in %.1fs", self.id, error.cause, wait)
            if self._service.stopping.is_set():
                break
            await self._manage_handover(store)
            if wait > 0:
                await self._sleep(wait)

    async def _round(self, store: RoundStore) -> float:
        """One statement. Answers how long to wait before the next round."""
        election = self._election
        fires, declared = self._cron.plan(election.known, self._estimate_now())
        request = RoundRequest(
            holder=self.id,
            host=self.host,
            pid=self.pid,
            ttl=self.lease,
            epoch=election.epoch,
            fires=fires,
            declared=declared,
            names=sorted(self.tasks),
        )
        answer = await store.round(request)
        self._anchor = _Anchor(answer.db_now, self._clock())
        self.stats.rounds += 1
        became = election.absorb(answer, self._clock())
        if not election.leading:
            self._cron.forget()
        self._cron.absorb(request, answer, leading=election.leading)
        if not election.leading:
            return election.standby_wait(self._clock(), self.interval)
        return self._cron.holder_wait(election.known, self._estimate_now(), became=became, interval=self.interval)

    def _estimate_now(self) -> datetime | None:
        """The database clock now: the last round's ``now()`` moved on by the monotonic clock."""
        if self._anchor is None:
            return None
        return self._anchor.db_now + timedelta(seconds=self._clock() - self._anchor.mono)

    async def _sleep(self, seconds: float) -> None:
        if self._waiter is not None:
            await self._waiter(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    # -- standing by and stepping down --------------------------------------------------------

    async def _manage_handover(self, store: RoundStore) -> None:
        """A standby listens for a released lease; the leader needs no such wake-up."""
        if not isinstance(store, HandoverSource):
            return
        if self.leading and self._handover is not None:
            await self._stop_listening()
        elif not self.leading and self._handover is None:
            self._handover = store.open_handover(self._wake)

    async def _stop_listening(self) -> None:
        handover, self._handover = self._handover, None
        if handover is not None:
            await handover.close()

    async def _step_down(self, store: RoundStore) -> None:
        epoch = self._election.step_down()
        if epoch is None:
            return
        try:
            released = await store.release(self.id, epoch)
        except WorkhorseError as error:
            log.warning(
                "scheduler %s: could not release the lease (%s); it lapses on its own within %gs",
                self.id,
                error.cause,
                self.lease,
            )
            return
        if released:
            log.info("scheduler %s: released the lease (epoch %d)", self.id, epoch)
