"""The bridge between the worker's two loops.

Design: docs/how-it-works/architecture.md
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any

from workhorse.worker.clock import lease_clock
from workhorse.worker.execute import Verdict, execute
from workhorse.worker.records import Held

log = logging.getLogger("workhorse.worker")


class Bridge:
    """Starts runs on the body loop and carries their verdicts back to the control loop.

    ``finished(held, verdict)`` and ``thread_exited(held)`` are called on the control loop;
    ``delivered()`` after each batch of them (the worker starts buffered runs into freed slots)."""

    def __init__(
        self,
        *,
        worker_id: str,
        visibility: float,
        beat: float,
        body_loop: asyncio.AbstractEventLoop,
        pool: Executor,
        finished: Callable[[Held, Verdict], None],
        thread_exited: Callable[[Held], None],
        delivered: Callable[[], None],
    ) -> None:
        self.worker_id = worker_id
        self.visibility = visibility
        self.beat = beat
        self.body_loop = body_loop
        self.pool = pool
        self._finished = finished
        self._thread_exited = thread_exited
        self._delivered = delivered
        self._control_loop: asyncio.AbstractEventLoop | None = None
        self._outbox: collections.deque[Callable[[], None]] = collections.deque()  # body loop -> control loop
        self._outbox_armed = False
        self._posts: list[Callable[[], None]] = []  # gathered on the body loop, flushed once a turn
        self._posts_flushing = False

    def attach(self, control_loop: asyncio.AbstractEventLoop) -> None:
        self._control_loop = control_loop

    # -- control loop -> body loop ------------------------------------------------------------

    def start(self, runs: list[Held]) -> None:
        """From the control loop: start ``runs`` (their slots already taken) in ONE wake-up."""
        if runs:
            self.body_loop.call_soon_threadsafe(self._spawn, runs)

    def cancel(self, held: Held, reason: str) -> None:
        """From any thread: cancel the run (its body at its next await; ``ctx.cancelled`` for a thread)."""
        self.body_loop.call_soon_threadsafe(held.run.cancel, reason)

    def on_body_loop(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """From the control loop: run a coroutine on the body loop (an ``on_settled`` hook)."""
        asyncio.run_coroutine_threadsafe(coroutine, self.body_loop)

    def to_control(self, call: Callable[[], None]) -> None:
        """From any thread: run ``call`` on the control loop, if it still runs."""
        loop = self._control_loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the control loop already closed
                loop.call_soon_threadsafe(call)

    # -- on the body loop ---------------------------------------------------------------------

    def _spawn(self, runs: list[Held]) -> None:
        """One task per run; each verdict goes back through the outbox."""
        loop = asyncio.get_running_loop()
        for held in runs:
            task = loop.create_task(self._execute(held), name=f"workhorse:{held.run.handle.name}")
            task.add_done_callback(functools.partial(self._ran, held))

    async def _execute(self, held: Held) -> Verdict:
        def thread_exit() -> None:
            self._post(functools.partial(self._thread_exited, held))

        def lease_open() -> bool:
            """A run starts only while its lease has a beat left: a lease that old missed its
            renewal (this process was frozen, or its renewals are failing) and may be lost by
            the time the body makes its first write."""
            waited = lease_clock() - held.renewed_at
            if waited < self.visibility - self.beat:
                return True
            log.warning(
                "worker %s: job %s (%s) not started: its lease was last set %.1fs ago, with less than a beat "
                "of its window left (was this process frozen?); it runs again once its lease lapses",
                self.worker_id,
                held.lease.job_id,
                held.run.handle.name,
                waited,
            )
            return False

        return await execute(held.run, self.pool, thread_exit, lease_open)

    def _ran(self, held: Held, task: asyncio.Task[Verdict]) -> None:
        verdict = Verdict(None)
        if task.cancelled():
            log.error(
                "worker %s: the run of job %s was cancelled outside the worker", self.worker_id, held.lease.job_id
            )
        elif task.exception() is not None:
            log.error("worker %s: executor failed for job %s: %r", self.worker_id, held.lease.job_id, task.exception())
        else:
            verdict = task.result()
        self._post(functools.partial(self._finished, held, verdict))

    def _post(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the control loop. Calls posted in one turn of the body loop are
        gathered and cross to the control loop together, in one wake-up."""
        self._posts.append(call)
        if not self._posts_flushing:
            self._posts_flushing = True
            asyncio.get_running_loop().call_soon(self._flush_posts)

    def _flush_posts(self) -> None:
        self._posts_flushing = False
        self._outbox.extend(self._posts)
        self._posts.clear()
        if not self._outbox_armed:
            self._outbox_armed = True
            assert self._control_loop is not None
            self._control_loop.call_soon_threadsafe(self._deliver)

    # -- on the control loop ------------------------------------------------------------------

    def _deliver(self) -> None:
        self._outbox_armed = False  # first: a call appended from now on arms a new delivery
        while self._outbox:
            self._outbox.popleft()()
        self._delivered()
