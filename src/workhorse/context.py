"""``JobContext``: what a job body is handed besides its payload."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workhorse.errors import ConfigurationError, JobCancelledError

if TYPE_CHECKING:
    from workhorse.steps import Steps


@dataclass
class JobContext:
    """The running attempt, as its body sees it.

    ``cancelled`` turns true when the attempt must stop: its ``timeout`` passed, the worker lost
    its lease, an operator cancelled the job, or a drain reached its cut-off. An ``async def``
    body is cancelled for it (``asyncio.CancelledError`` at its next await); a plain ``def`` body
    runs in a thread that cannot be interrupted, so it should check ``ctx.cancelled`` or call
    ``ctx.raise_if_cancelled()`` between units of work. Whatever a cancelled attempt returns
    afterwards is never written.

    ``step`` is the durable-step API (``workhorse.steps``): ``await ctx.step.run(name, fn, ...)``,
    ``ctx.step.sleep``, ``ctx.step.sleep_until`` and ``ctx.step.wait_for_event``.
    """

    id: str
    name: str
    queue: str
    tenant: str | None
    attempt: int
    max_attempts: int
    worker_id: str
    logger: logging.Logger = field(repr=False)
    _cancelled: bool = field(default=False, repr=False)
    _wakeup: threading.Event | None = field(default=None, repr=False)  # made only if a body waits on it
    _reason: str | None = field(default=None, repr=False)
    _steps: Steps | None = field(default=None, repr=False)
    _make_steps: Callable[[], Steps] | None = field(default=None, repr=False)  # built on first use
    # True while a step statement that may suspend the job is in flight: the lease can vanish
    # then because this run released it, which the worker must not report as a lost lease.
    _releasing: bool = field(default=False, repr=False)

    @property
    def step(self) -> Steps:
        """Durable steps of this run (``run``, ``sleep``, ``sleep_until``, ``wait_for_event``)."""
        if self._steps is None and self._make_steps is not None:
            self._steps = self._make_steps()
        if self._steps is None:
            raise ConfigurationError(
                code="STEPS_UNAVAILABLE",
                cause=f"this JobContext of job {self.name!r} was not made by a worker, so it has no step store",
                fix="run the job through a worker (await app.worker().run(burst=True)) to use ctx.step",
            )
        return self._steps

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def cancel_reason(self) -> str | None:
        return self._reason

    @property
    def is_final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def idempotency_token(self) -> str:
        """Stable per attempt (``<job id>:<attempt>``): hand it to a downstream API that dedupes."""
        return f"{self.id}:{self.attempt}"

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise JobCancelledError(self.name, self.id, self._reason or "cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block a sync body up to ``timeout`` seconds; answers True when the attempt was cancelled."""
        if self._wakeup is None:
            self._wakeup = threading.Event()
            if self._cancelled:  # cancelled before the event existed
                self._wakeup.set()
        return self._wakeup.wait(timeout)

    def mark_cancelled(self, reason: str) -> None:
        if not self._cancelled:
            self._reason = reason
            self._cancelled = True
            if self._wakeup is not None:
                self._wakeup.set()

    def extra(self) -> dict[str, Any]:
        return {"job_id": self.id, "job": self.name, "attempt": self.attempt}
