"""``app.hooks``: one place where every job lifecycle event of this app's workers is emitted.

    @app.hooks
    def count(event: LifecycleEvent) -> None:
        metrics.labels(event.kind, event.name).inc()

Kinds, in the order a run meets them: ``claimed`` (a worker took it), ``started`` (handed to the
body loop to run now), then one of ``completed``, ``retried``, ``dead-lettered``, ``failed``
(failed for good with ``dead_letter=False``), ``handed-back`` (a drain gave it back unspent) once
its settle landed; or ``lease-lost``: the run stopped writing nothing because the row is no longer
its own (its lease lapsed, another worker re-claimed it, or an operator cancelled it while it ran:
the worker cannot tell these apart). A run the claim itself ended (its lease lapsed on its final
attempt: ``dead-lettered`` or ``failed``; refused by its concurrency key: ``failed``) is emitted by
the worker whose claim ended it, with no ``claimed`` before it; one the rescuer buried
(``workhorse.leader.rescue``) by the worker or the scheduler whose rescue did, its id as ``worker_id``. A worker
emits ``drained`` once when it stops (no job fields). ``on_settled`` is unchanged and separate.

Every callback is called synchronously, on the worker's control thread, in the order added: keep
it short (count, log, hand off to a queue). One that raises is logged and skipped; it never
affects the job. With no callback added, emitting costs one attribute test.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("workhorse.hooks")

EventKind = Literal[
    "claimed",
    "started",
    "completed",
    "retried",
    "dead-lettered",
    "failed",
    "handed-back",
    "lease-lost",
    "drained",
]
OUTCOME_KINDS: dict[str, EventKind] = {
    "done": "completed",
    "retry": "retried",
    "dead": "dead-lettered",
    "failed": "failed",
    "interrupted": "handed-back",
}


@dataclass(frozen=True)
class LifecycleEvent:
    """One event. Job fields are None for ``drained``; ``duration_ms`` is the body's run time (the
    settled kinds), ``error`` the attempt's ``last_error`` (type, message, traceback), ``delay`` a
    retry's seconds until its next try."""

    kind: EventKind
    worker_id: str
    job_id: str | None = None
    name: str | None = None
    queue: str | None = None
    attempt: int | None = None
    duration_ms: float | None = None
    error: dict[str, Any] | None = None
    delay: float | None = None
    at: float = field(default_factory=time.time)  # clock-ok: a wall-clock stamp for the subscriber


Callback = Callable[[LifecycleEvent], Any]


class Hooks:
    """The app's lifecycle-event subscribers. ``app.hooks.add(fn)`` (or ``@app.hooks``) answers
    ``fn``; ``app.hooks.remove(fn)`` takes it away."""

    def __init__(self) -> None:
        self._callbacks: tuple[Callback, ...] = ()

    def __bool__(self) -> bool:
        return bool(self._callbacks)

    def __call__(self, fn: Callback) -> Callback:
        return self.add(fn)

    def add(self, fn: Callback) -> Callback:
        if not callable(fn):
            from workhorse.errors import ConfigurationError

            raise ConfigurationError(cause=f"app.hooks.add expected a function, got {fn!r}", fix="@app.hooks")
        self._callbacks = (*self._callbacks, fn)
        return fn

    def remove(self, fn: Callback) -> None:
        self._callbacks = tuple(c for c in self._callbacks if c != fn)  # ==: a bound method is made anew

    def emit(self, event: LifecycleEvent) -> None:
        for callback in self._callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("a lifecycle hook (%r) failed on %s of job %s", callback, event.kind, event.job_id)

    def job(
        self,
        kind: EventKind,
        worker_id: str,
        claimed: Any,
        *,
        duration: float | None = None,
        error: str | dict[str, Any] | None = None,
        delay: float | None = None,
    ) -> None:
        """Emit ``kind`` for a run (a ``drivers.base.Claimed``, or a ``Buried`` row the claim ended),
        when anyone listens. ``error``: the attempt's ``last_error``, as JSON text or decoded."""
        if not self._callbacks:
            return
        self.emit(
            LifecycleEvent(
                kind=kind,
                worker_id=worker_id,
                job_id=claimed.id,
                name=claimed.name,
                queue=claimed.queue,
                attempt=claimed.attempt,
                duration_ms=None if duration is None else round(duration * 1000, 3),
                error=json.loads(error) if isinstance(error, str) else error,
                delay=delay,
            )
        )
