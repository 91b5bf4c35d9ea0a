"""Retention: how long what only grows is kept, and the purge that removes the rest.

``App()`` keeps a policy by default (``DEFAULT_RETENTION``); ``App(retention=None)`` keeps
everything. The fleet's scheduler leader purges on its own cadence (``every``, hourly by
default); ``workhorse purge`` (``app.admin.purge()``) does it now. What each target removes:

====================== ===========================================================================
``done``               jobs finished ``done`` longer ago than this (their steps go with them)
``cancelled``          jobs cancelled longer ago than this
``failed``             jobs failed for good (``dead_letter=False``) longer ago than this
``dead``               dead-lettered jobs, longer ago than this
``events``             stored events expired longer ago than this (``0``: at their expiry)
``workers``            registry rows of workers gone (expired) longer ago than this
``flow_starts``        per-tenant rate stamps older than this (never less than the app's rate window)
``counters``           day counters older than this (minute and hour counters are folded into days)
``webhook_deliveries`` webhook delivery ledger rows older than this, by attempt (``created_at``)
====================== ===========================================================================

A target set to ``None`` is kept forever. A live job (ready, delayed, running, suspended) is
never purged, whatever its age. An idempotency key holds only while its job is live, so purging
a finished keyed job lets in nothing its finishing had not already let in. The memory driver has
no webhooks: its ``webhook_deliveries`` count is always 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError
from workhorse.types import PURGE_TARGETS, FlowRules, PurgePolicy

MAX_BATCH = 10_000
JOB_TARGETS = ("done", "cancelled", "failed", "dead")
# The drivers' targets, then the webhooks delivery ledger (migration 014's table, always present).
TARGETS: tuple[str, ...] = (*PURGE_TARGETS, "webhook_deliveries")


@dataclass(frozen=True, init=False)
class Retention:
    """Ages past which finished and expired rows are purged, in seconds (None: kept forever)."""

    done: float | None
    cancelled: float | None
    failed: float | None
    dead: float | None
    events: float | None
    workers: float | None
    flow_starts: float | None
    counters: float | None
    webhook_deliveries: float | None
    every: float
    batch: int

    def __init__(
        self,
        *,
        done: Duration | None = "1d",
        cancelled: Duration | None = "1d",
        failed: Duration | None = "7d",
        dead: Duration | None = "14d",
        events: Duration | None = 0,
        workers: Duration | None = "1d",
        flow_starts: Duration | None = "1d",
        counters: Duration | None = "400d",
        webhook_deliveries: Duration | None = "30d",
        every: Duration = "1h",
        batch: int = 500,
    ) -> None:
        ages: dict[str, Any] = {
            "done": done,
            "cancelled": cancelled,
            "failed": failed,
            "dead": dead,
            "events": events,
            "workers": workers,
            "flow_starts": flow_starts,
            "counters": counters,
            "webhook_deliveries": webhook_deliveries,
        }
        for target, value in ages.items():
            seconds = None if value is None else to_seconds(value, what=f"Retention({target})")
            object.__setattr__(self, target, seconds)
        object.__setattr__(self, "every", to_seconds(every, what="Retention(every)", allow_zero=False))
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise ConfigurationError(
                cause=f"Retention(batch) expected a whole number from 1 to {MAX_BATCH}, got {batch!r}",
                fix="Retention(batch=500)   # rows per statement: small batches keep each lock short",
            )
        object.__setattr__(self, "batch", batch)

    def policy(self, *, rate_window: float | None = None) -> PurgePolicy:
        """The driver's policy: every kept target's age (a rate's stamps live at least its window)."""
        ages = {t: getattr(self, t) for t in TARGETS if getattr(self, t) is not None}
        if "flow_starts" in ages and rate_window is not None:
            ages["flow_starts"] = max(ages["flow_starts"], rate_window)
        return PurgePolicy(ages, self.batch)


DEFAULT_RETENTION = Retention()


@dataclass(frozen=True)
class PurgeReport:
    """What a purge removed (or, with ``dry_run``, would remove), per target."""

    removed: dict[str, int]
    steps: int
    dry_run: bool

    @property
    def total(self) -> int:
        return sum(self.removed.values()) + self.steps

    def to_dict(self) -> dict[str, Any]:
        others = {t: self.removed.get(t, 0) for t in TARGETS if t not in JOB_TARGETS}
        return {
            "removed": {"jobs": {t: self.removed.get(t, 0) for t in JOB_TARGETS}, "steps": self.steps, **others},
            "dry_run": self.dry_run,
        }


def purge_policy(retention: Retention | None, flow: FlowRules | None) -> PurgePolicy | None:
    """The driver's policy for an app (None: ``retention=None``, keep everything)."""
    if retention is None:
        return None
    return retention.policy(rate_window=None if flow is None else flow.rate_window)
