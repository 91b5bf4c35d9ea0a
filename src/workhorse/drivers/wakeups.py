"""The optional wake-up role of a driver: how enqueues (and cancels) wake an idle worker.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable


class Wakeups(Protocol):
    """A live subscription to a driver's wake-ups for some queues, opened on the worker's control
    loop by ``WakeupSource.open_wakeups``. It sets the ``wake`` event it was given when work may
    have become due, and ``beat`` when a running job of those queues was cancelled (its worker
    should renew now and find the claim gone). A worker without one polls every ``poll_interval``."""

    @property
    def healthy(self) -> bool:
        """While True, new due work is certain to be announced: the worker may poll rarely."""

    @property
    def tells_due(self) -> bool:
        """The wake-ups say which work is due (a job due now, or a changed due time), so an idle
        worker may sleep through wakes that cannot have made work due for it."""

    def take(self) -> tuple[bool, bool]:
        """What the wake-ups said since the last take, and forget it: (a job is due now, a due
        time changed: run the full claim)."""

    def pending(self) -> bool:
        """Something was said since the last take."""

    def missed(self) -> None:
        """The claim that looked at the last wake-up failed: count it as a changed due time."""

    async def close(self) -> None:
        """End the subscription (its session, for a database driver)."""


@runtime_checkable
class WakeupSource(Protocol):
    """A driver whose enqueues (and cancels) can wake a worker: the optional wake-up role."""

    def open_wakeups(self, queues: Sequence[str], wake: asyncio.Event, beat: asyncio.Event) -> Wakeups | None:
        """Open wake-ups for ``queues``, on the running loop (the worker's control loop). None: none
        can be had here (behind a transaction pooler without ``WORKHORSE_LISTEN_URL``): poll."""


class Subscription:
    """Wake-ups from in-process callbacks (the memory driver's subscriptions): never down, and
    silent about what woke them, so a worker claims on every wake and polls at ``poll_interval``."""

    healthy = False  # poll every poll_interval, as for a driver without wake-ups
    tells_due = False

    def __init__(self, unsubscribe: Callable[[], None]) -> None:
        self._unsubscribe = unsubscribe

    def take(self) -> tuple[bool, bool]:
        return False, False

    def pending(self) -> bool:
        return False

    def missed(self) -> None:
        pass

    async def close(self) -> None:
        self._unsubscribe()
