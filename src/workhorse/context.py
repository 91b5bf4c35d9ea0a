"""``JobContext``: what a job body is handed besides its payload."""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from workhorse.errors import ConfigurationError, JobCancelledError
from workhorse.storable import storable

if TYPE_CHECKING:
    from workhorse.deps import Dependency
    from workhorse.steps import Steps


PROGRESS_INTERVAL = 1.0  # seconds: at most one progress write per job in this long
MAX_PROGRESS_MESSAGE = 500  # characters kept of a progress message


def progress_report(value: Any, message: Any, *, job: str) -> dict[str, Any]:
    """Check one ``ctx.progress`` call and answer what is stored: fraction, done, total, message, at."""
    done: int | None = None
    total: int | None = None
    fraction: float | None = None
    if isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value):
        done, total = value
        if total > 0 and done >= 0:
            fraction = min(done / total, 1.0)
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1:
        fraction = float(value)
    if fraction is None:
        raise ConfigurationError(
            code="PROGRESS_INVALID",
            cause=f"job {job!r} reported progress {value!r}; expected a fraction from 0 to 1 or "
            "(done, total) with 0 <= done and total > 0",
            fix="ctx.progress(0.5) or ctx.progress((50, 100), 'halfway')",
        )
    if message is not None and not isinstance(message, str):
        raise ConfigurationError(
            code="PROGRESS_INVALID",
            cause=f"job {job!r} reported a progress message of type {type(message).__name__}; expected a string",
            fix="ctx.progress(0.5, message='halfway')",
        )
    return {
        "fraction": round(fraction, 6),
        "done": done,
        "total": total,
        "message": None if message is None else storable(message[:MAX_PROGRESS_MESSAGE]),
        "at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),  # clock-ok: display only
    }


class RunHooks(Protocol):
    """What a worker gives the context of a run it holds."""

    def make_steps(self) -> Steps: ...

    def progress_requested(self) -> None:
        """The run has a new report to write (called from the body's thread or loop)."""

    def draining(self) -> bool:
        """The worker holding the run began a drain (it claims nothing more)."""


class HandBack(Exception):
    """Raised by ``ctx.hand_back()``: the body stopped at a safe point during a drain; the run goes
    back ``ready`` with its attempt unspent, as a drain's cut-off would hand it back."""


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

    ``progress(0.4, "resized 40 of 100")`` or ``progress((40, 100))`` reports how far the attempt
    got; ``workhorse show`` and ``ls`` display it. Call it as often as you like: it never waits on
    the database: once a second at most, the worker writes every run's newest report in one
    statement (each fenced on its claim, like every write of the run). The latest report is
    written with the settle in any case.

    ``draining`` turns true when the worker holding the run begins a drain; a body working in
    committed units may then call ``hand_back()`` between two of them: the run goes back ``ready``,
    attempt unspent, now rather than at the drain's cut-off (a backfill pass does).

    ``dependencies`` lists the jobs this one was enqueued after (``after=[...]``), in that order:
    each a ``workhorse.Dependency`` (id, name, state, result, last_error); empty for the rest.
    """

    id: str
    name: str
    queue: str
    tenant: str | None
    attempt: int
    max_attempts: int
    worker_id: str
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(repr=False)  # carries extra()
    # The jobs it was enqueued after (after=[...]), in that order, as its claim read them.
    dependencies: list[Dependency] = field(default_factory=list)
    _cancelled: bool = field(default=False, repr=False)
    _wakeup: threading.Event | None = field(default=None, repr=False)  # made only if a body waits on it
    _reason: str | None = field(default=None, repr=False)
    _steps: Steps | None = field(default=None, repr=False)
    # What the worker running this attempt provides (None outside a worker): the step store,
    # built on first use, and progress writes. One reference per run, nothing built up front.
    _hooks: RunHooks | None = field(default=None, repr=False)
    # True while a step statement that may suspend the job is in flight: the lease can vanish
    # then because this run released it, which the worker must not report as a lost lease.
    _releasing: bool = field(default=False, repr=False)
    # Progress: the latest report (JSON text), the last one handed to the worker to write, and
    # whether the worker has been told of a newer one. Each report is a new str: compared by identity.
    _progress_latest: str | None = field(default=None, repr=False)
    _progress_written: str | None = field(default=None, repr=False)
    _progress_scheduled: bool = field(default=False, repr=False)

    def progress(self, value: float | tuple[int, int], message: str | None = None) -> None:
        """Report progress: a fraction from 0 to 1, or ``(done, total)``, with an optional message."""
        report = progress_report(value, message, job=self.name)
        text = json.dumps(report)
        self._progress_latest = text
        hooks = self._hooks
        if hooks is not None and not self._progress_scheduled:
            self._progress_scheduled = True
            hooks.progress_requested()

    def take_progress(self) -> str | None:
        """For the worker: the report to write now (None when nothing is new); the next report
        asks the worker again."""
        self._progress_scheduled = False  # first: a report made from now on asks again
        text = self._progress_latest
        if text is self._progress_written:
            return None
        self._progress_written = text
        return text

    @property
    def step(self) -> Steps:
        """Durable steps of this run (``run``, ``sleep``, ``sleep_until``, ``wait_for_event``)."""
        if self._steps is None and self._hooks is not None:
            self._steps = self._hooks.make_steps()
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
    def draining(self) -> bool:
        """True once the worker holding this run began a drain (SIGTERM, ``worker.stop()``). A long
        body that works in units can then stop between two of them with ``ctx.hand_back()``
        instead of running on until the drain's cut-off. False outside a worker."""
        hooks = self._hooks
        return hooks is not None and hooks.draining()

    def hand_back(self) -> NoReturn:
        """Stop now and give the run back ``ready``, attempt unspent (only while ``draining``): the
        next worker to claim it runs it again from the top, so call it between units whose work is
        already committed. Raises ``HandBack``, which the worker catches."""
        if not self.draining:
            raise ConfigurationError(
                code="HAND_BACK_INVALID",
                cause=f"job {self.name!r} called ctx.hand_back() while its worker is not draining",
                fix="if ctx.draining: ctx.hand_back()",
            )
        raise HandBack

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
