"""The vacuum duty: once a minute the fleet's leader vacuums the schema's table furthest past its
dead-row threshold (``VACUUM (SKIP_LOCKED, ANALYZE)``), and logs what health warns of.
``WORKHORSE_VACUUM=on|off`` (on when unset) or ``Scheduler(vacuum=...)`` switches it.

Design: docs/guides/vacuum.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from datetime import datetime

from workhorse.errors import ConfigurationError, WorkhorseError
from workhorse.health.report import (
    DEAD_ROWS_BASE,
    DEAD_ROWS_SHARE,
    PINNED_AFTER,
    HealthReport,
    HealthRole,
    HealthWarning,
    TableHealth,
    read_health,
)
from workhorse.leader.store import RoundStore

log = logging.getLogger("workhorse.scheduler")

ENV_VACUUM = "WORKHORSE_VACUUM"
VACUUM_EVERY = 60.0  # seconds between two turns (one table a turn at most)
RECENT = 60.0  # a table vacuumed (by anyone) this few seconds ago is left alone
VACUUM_TIMEOUT = 300.0  # seconds one table's vacuum may take before it is cancelled
RECENT_SLACK = 5.0  # seconds of clock difference allowed when telling our vacuum from an older one
WARN_EVERY = 600.0  # seconds between two log lines of one standing warning
EVERY_SHARE = 0.8  # of VACUUM_EVERY: a round a little early still takes its turn
_ON = ("on", "true", "1", "yes")
_OFF = ("off", "false", "0", "no")


def vacuum_setting(value: object = None) -> bool:
    """Whether the leader vacuums: ``value`` when a bool, else ``WORKHORSE_VACUUM`` (on when
    unset); anything else is refused (``VACUUM_SETTING_INVALID``)."""
    if isinstance(value, bool):
        return value
    if value is not None:
        raise ConfigurationError(
            code="VACUUM_SETTING_INVALID",
            cause=f"vacuum expected True, False or None (WORKHORSE_VACUUM decides), got {value!r}",
            fix="Scheduler(app, vacuum=False)   # or leave it None and set WORKHORSE_VACUUM=off",
        )
    raw = os.environ.get(ENV_VACUUM, "").strip().lower()
    if raw in ("", *_ON):
        return True
    if raw in _OFF:
        return False
    raise ConfigurationError(
        code="VACUUM_SETTING_INVALID",
        cause=f"{ENV_VACUUM}={raw!r} is neither on nor off",
        fix=f"{ENV_VACUUM}=off to leave vacuuming to autovacuum or to you; unset it (or =on) for the leader's vacuum",
    )


class VacuumDuty:
    """A ``Duty``: at most once per ``every`` of the database clock, in a task of its own (a vacuum
    may take minutes; rounds go on), one turn of ``turn``. ``driver`` answers the driver to use,
    read at each turn; a driver without the health role (the memory driver) leaves the duty idle."""

    def __init__(
        self,
        scheduler_id: str,
        driver: Callable[[], object],
        *,
        enabled: bool = True,
        every: float = VACUUM_EVERY,
        base: int = DEAD_ROWS_BASE,
        share: float = DEAD_ROWS_SHARE,
        recent: float = RECENT,
        timeout: float = VACUUM_TIMEOUT,
        pinned_after: float = PINNED_AFTER,
    ) -> None:
        self.scheduler_id = scheduler_id
        self.driver = driver
        self.enabled = enabled
        self.every = every
        self.base, self.share, self.recent, self.timeout = base, share, recent, timeout
        self.pinned_after = pinned_after
        self.vacuumed: list[str] = []  # tables this duty vacuumed, in order (for tests and logs)
        self._left: dict[str, int] = {}  # dead rows a table still held after our last vacuum of it
        self._warned: dict[tuple[str, str], float] = {}
        self._last: datetime | None = None
        self._task: asyncio.Task[str | None] | None = None

    async def after_round(self, store: RoundStore, db_now: datetime) -> None:
        if self._task is not None and not self._task.done():
            return
        if self._last is not None and (db_now - self._last).total_seconds() < self.every * EVERY_SHARE:
            return
        self._last = db_now
        self._task = asyncio.create_task(self.turn(), name="vacuum")

    async def turn(self) -> str | None:
        """Read the tables' health; vacuum the one furthest past its threshold (when on); log the
        warnings. Answers the table vacuumed, if any. Errors are logged, never raised."""
        driver = self.driver()
        if not isinstance(driver, HealthRole):
            return None
        try:
            return await self._turn(driver)
        except WorkhorseError as error:
            log.warning(
                "scheduler %s: the vacuum turn failed (%s); tried again in %gs",
                self.scheduler_id,
                error.cause,
                self.every,
            )
            return None

    async def _turn(self, driver: HealthRole) -> str | None:
        report = await self._read(driver)
        if not report.holders:
            self._left.clear()  # nothing pins the horizon (for long): what a vacuum left, it can remove now
        chosen = self._choose(report.tables) if self.enabled else None
        if chosen is None:
            self._log(report.warnings)
            return None
        took = await driver.vacuum_table(chosen.table, self.timeout)
        report = await self._read(driver)
        after = next((t for t in report.tables if t.table == chosen.table), None)
        if after is None or after.vacuumed_ago is None or after.vacuumed_ago > took + RECENT_SLACK:
            # SKIP_LOCKED: a session held a lock that conflicts with VACUUM's (a DDL, LOCK TABLE,
            # another vacuum); PostgreSQL skipped the table rather than wait. The next turn tries again.
            log.info(
                "scheduler %s: the vacuum of %s.%s was skipped: another session holds a conflicting lock on it",
                self.scheduler_id,
                driver.schema,
                chosen.table,
            )
            self._log(report.warnings)
            return None
        self._left[chosen.table] = after.dead
        self.vacuumed.append(chosen.table)
        log.info(
            "scheduler %s: vacuumed %s.%s in %.2fs (%s dead rows of %s live before, %s after)",
            self.scheduler_id,
            driver.schema,
            chosen.table,
            took,
            f"{chosen.dead:,}",
            f"{chosen.live:,}",
            f"{after.dead:,}",
        )
        self._log(report.warnings)
        return chosen.table

    async def _read(self, driver: HealthRole) -> HealthReport:
        return await read_health(driver, base=self.base, share=self.share, pinned_after=self.pinned_after)

    def _choose(self, tables: list[TableHealth]) -> TableHealth | None:
        """The table furthest past its threshold that nobody vacuumed in the last ``recent``
        seconds; past a vacuum that left dead rows behind (a pinned horizon), only once as many
        again have died (a vacuum a minute that frees nothing only costs)."""
        due = [
            t
            for t in tables
            if t.dead - self._left.get(t.table, 0) > t.threshold
            and (t.vacuumed_ago is None or t.vacuumed_ago >= self.recent)
        ]
        return max(due, key=lambda t: t.dead - t.threshold, default=None)

    def _log(self, warnings: list[HealthWarning]) -> None:
        now = time.monotonic()
        standing = {(w.code, w.subject) for w in warnings}
        self._warned = {k: v for k, v in self._warned.items() if k in standing}
        for w in warnings:
            key = (w.code, w.subject)
            if key in self._warned and now - self._warned[key] < WARN_EVERY:
                continue
            self._warned[key] = now
            log.warning("scheduler %s: %s (%s); fix: %s", self.scheduler_id, w.code, w.cause, w.fix)

    async def close(self) -> None:
        """Stop a turn in flight (a vacuum cancelled midway keeps what it did; the next finishes it)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def vacuum_every(duty: VacuumDuty, stopping: asyncio.Event) -> None:
    """With no task there is no election: every idle role takes a turn soon after it starts, then
    one every ``duty.every`` (jittered), until ``stopping`` is set. Two roles rarely vacuum one
    table twice: a table vacuumed in the last minute is left alone, and SKIP_LOCKED skips a vacuum
    in progress."""
    wait = duty.every * random.uniform(0.1, 1.0)
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=wait)
            return
        await duty.turn()
        wait = duty.every * random.uniform(0.9, 1.1)
