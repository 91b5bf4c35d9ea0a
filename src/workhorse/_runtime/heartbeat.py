"""The worker's lease side: its registry row, the heartbeat that renews every held lease, and the
watch on the body loop.

Runs on the control loop (``heartbeat_loop`` is one of its tasks). Plain functions over the
``Worker`` they serve.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
from typing import TYPE_CHECKING

from workhorse._runtime.clock import lease_clock
from workhorse._runtime.state import Control, Held
from workhorse.drivers.base import Beat, WorkerInfo
from workhorse.errors import DatabaseError, WorkhorseError

if TYPE_CHECKING:
    from workhorse.worker import Worker

log = logging.getLogger("workhorse.worker")

IDLE_BEAT_SHARE = 2 / 3  # an idle worker renews its registry row after 2/3 of its time to live
LOOP_LAG_WARNING = 1.0  # seconds the body loop may be unresponsive before we name the culprit


class LoopWatch:
    """Is the body loop answering? A ping is posted to it; until the ping runs, the loop is busy
    with something that does not yield. Read from the control thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sent_at: float | None = None
        self.warned_at = -math.inf

    def silent_for(self) -> float:
        """Seconds the outstanding ping has waited (0 when none was outstanding: one is sent)."""
        if self.sent_at is None:
            self.sent_at = time.monotonic()
            self.loop.call_soon_threadsafe(self._answered)
            return 0.0
        return time.monotonic() - self.sent_at

    def _answered(self) -> None:
        self.sent_at = None


async def register(worker: Worker, control: Control) -> None:
    info = WorkerInfo(
        id=worker.id,
        host=socket.gethostname(),
        pid=os.getpid(),
        queues=list(worker.queues),
        concurrency=dict(worker.concurrency),
    )
    try:
        await control.heartbeat.register_worker(info, worker.visibility)
    except WorkhorseError as error:  # the registry is for operators; never a reason not to work
        log.warning("worker %s: could not write its registry row (%s)", worker.id, error.cause)


async def heartbeat_loop(worker: Worker, control: Control) -> None:
    """One statement per beat renews the registry row and every held lease.

    Two deadlines, and the beat comes at the earlier one, so no arrival pattern can postpone
    either: the registry row is renewed two thirds of the visibility window after its last
    renewal landed (it is all an idle worker needs), and each held lease a beat (a third of the
    window, at most 10 s) after the statement that last set it, its claim or a renewal. A job
    claimed just now therefore gets its first renewal a beat later and two more chances before
    its window closes, and a stream of short claims on an idle worker (each a fresh lease) never
    pushes the registry's renewal back. A cancel's NOTIFY (the listener's ``beat``) brings the
    beat forward, so a cancelled body stops now. A failed renewal is tried again half a beat
    later; a lease whose window closed without one is lost. A renewal that lands after a whole
    window without one wakes the claim loop, which claimed nothing meanwhile."""
    assert worker._body_loop is not None
    watch = LoopWatch(worker._body_loop)
    retry_at = -math.inf
    while True:
        with worker._lock:
            held = [h for h in worker._held.values() if not h.settled]
        due = control.last_renewal + worker.visibility * IDLE_BEAT_SHARE
        if held:
            due = min(due, min(h.renewed_at for h in held) + worker.heartbeat_interval)
        if not control.beat.is_set() and not await _rest(control, max(due, retry_at) - lease_clock()):
            continue  # a claim took leases: the schedule may have moved
        control.beat.clear()
        with worker._lock:
            held = [h for h in worker._held.values() if not h.settled]
        asked_at = lease_clock()
        lost = {h.lease.job_id for h in lose(worker, held, asked_at)}  # windows closed before this beat
        held = [h for h in held if h.lease.job_id not in lost]  # not renewed: maybe another's lease now
        try:
            beat = await renewal(worker, control, held)
        except WorkhorseError as error:
            now = lease_clock()
            log.warning(
                "worker %s: lease renewal failed (%s); no renewal landed for %.1fs",
                worker.id,
                error.cause,
                now - control.last_renewal,
            )
            lose(worker, held, now)
            retry_at = now + worker.heartbeat_interval / 2
            continue
        paused = lease_clock() - control.last_renewal >= worker.visibility  # the claim loop stopped claiming
        control.last_renewal = asked_at
        for h in held:
            h.renewed_at = max(h.renewed_at, asked_at)
        if paused:
            control.wake.set()
        if not beat.registered:
            await register(worker, control)
        for h in held:
            if h.lease.job_id not in beat.held and not h.settled and not h.run.ctx._releasing:
                log.warning(
                    "worker %s: job %s (%s) is no longer ours: cancelling its body",
                    worker.id,
                    h.lease.job_id,
                    h.run.handle.name,
                )
                worker._cancel_run(h, "lease lost")
        if held:
            check_body_loop(worker, watch, held)


async def _rest(control: Control, seconds: float) -> bool:
    """Sleep until the next beat is due (True), or until a cancel asks for one now (True), or
    until a claim took leases (False: compute the schedule again)."""
    control.leased.clear()
    if seconds <= 0:
        return True
    beat = asyncio.ensure_future(control.beat.wait())
    leased = asyncio.ensure_future(control.leased.wait())
    try:
        await asyncio.wait({beat, leased}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        beat.cancel()
        leased.cancel()
    return control.beat.is_set() or not control.leased.is_set()


def lose(worker: Worker, held: list[Held], now: float) -> list[Held]:
    """Cancel the runs of ``held`` whose lease window closed by ``now`` with no renewal landed:
    each lease may have lapsed and been claimed by another worker, so the run writes nothing.
    Answers those runs."""
    closed = [h for h in held if now >= h.renewed_at + worker.visibility]
    for h in closed:
        worker._cancel_run(h, "lease lost")
    return closed


async def renewal(worker: Worker, control: Control, held: list[Held]) -> Beat:
    """One renewal of ``held``, answered or failed by the time the first of their windows closes.

    The window is measured here, not by the statement: a connection that went silent (a
    half-open TCP session, a stalled server) neither answers nor fails, and the kernel may take
    a quarter of an hour to say so. Its leases lapse on the server meanwhile and another worker
    may claim the jobs, so when a window closes the statement is abandoned (cancelled in the
    background) and the caller is told it failed, which cancels the runs whose window closed.
    Past every window (those runs already cancelled), a renewal gets one beat's time to land,
    so a worker whose database comes back recovers."""
    call = asyncio.ensure_future(control.heartbeat.heartbeat(worker.id, [h.lease for h in held], worker.visibility))
    now = lease_clock()
    closes = [h.renewed_at + worker.visibility for h in held if h.renewed_at + worker.visibility > now]
    window_left = (min(closes) if closes else control.last_renewal + worker.visibility) - now
    try:
        await asyncio.wait({call}, timeout=window_left if window_left > 0 else worker.heartbeat_interval)
    finally:
        if not call.done():  # unanswered before a window closed, or the worker is stopping
            # Not awaited: on a dead connection psycopg's cancellation can take seconds more, and
            # the runs must be cancelled now. It ends in the background, freeing the connection.
            call.cancel()
            call.add_done_callback(_retrieve)
    if not call.done() or call.cancelled():
        raise DatabaseError(
            code="LEASE_RENEWAL_UNANSWERED",
            # logged as "lease renewal failed (<cause>)"
            cause=f"no answer within the visibility window ({worker.visibility:g}s)",
            fix="check the network path to PostgreSQL and the server's load; the jobs run again elsewhere",
        )
    return call.result()


def _retrieve(call: asyncio.Future[Beat]) -> None:
    if not call.cancelled():
        call.exception()  # an abandoned renewal's error: already reported as unanswered


def check_body_loop(worker: Worker, watch: LoopWatch, held: list[Held]) -> None:
    """Warn (at most every 10 s) when the body loop stops answering: an async body blocks it."""
    silent = watch.silent_for()
    now = time.monotonic()
    if silent > LOOP_LAG_WARNING and now - watch.warned_at > 10:
        culprits = sorted({h.run.handle.name for h in held if h.run.handle.is_async and not h.body_done})
        log.warning(
            "worker %s: the event loop running job bodies has not answered for %.1fs; an async body "
            "is blocking it (time.sleep or CPU work?): %s. Its lease is still renewed.",
            worker.id,
            silent,
            ", ".join(culprits) or "unknown",
        )
        watch.warned_at = now
