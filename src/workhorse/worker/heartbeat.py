"""The worker's lease side: its registry row, the heartbeat that renews every held lease, and the
watch on the body loop.

Runs on the control loop (``Heartbeat.run`` is one of its tasks). It reads the leases to renew
from the table of held runs and cancels a run through the callback it was given; it owns the
schedule and the window arithmetic, nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from workhorse.errors import DatabaseError, WorkhorseError
from workhorse.types import Beat, FlowRules, WorkerInfo
from workhorse.worker.clock import lease_clock
from workhorse.worker.records import Control, Held
from workhorse.worker.table import RunTable

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


class Heartbeat:
    """Renews the registry row and every held lease, one statement per beat.

    Two deadlines, and the beat comes at the earlier one, so no arrival pattern can postpone
    either: the registry row is renewed two thirds of the visibility window after its last
    renewal landed (it is all an idle worker needs), and each held lease a beat (a third of the
    window, at most 10 s) after the statement that last set it, its claim or a renewal. A job
    claimed just now therefore gets its first renewal a beat later and two more chances before
    its window closes, and a stream of short claims on an idle worker (each a fresh lease) never
    pushes the registry's renewal back. A cancel's NOTIFY (``control.beat``) brings the beat
    forward, so a cancelled body stops now. A failed renewal is tried again half a beat later; a
    lease whose window closed without one is lost. A renewal that lands after a whole window
    without one wakes the claim loop, which claimed nothing meanwhile."""

    def __init__(
        self,
        info: WorkerInfo,
        *,
        visibility: float,
        interval: float,
        control: Control,
        table: RunTable,
        cancel: Callable[[Held, str], None],
        body_loop: asyncio.AbstractEventLoop,
        flow: FlowRules | None = None,
    ) -> None:
        self.info = info
        self.flow = flow
        self.visibility = visibility
        self.interval = interval
        self.control = control
        self.table = table
        self.cancel = cancel
        self.watch = LoopWatch(body_loop)

    async def register(self) -> None:
        try:
            await self.control.heartbeat.register_worker(self.info, self.visibility)
        except WorkhorseError as error:  # the registry is for operators; never a reason not to work
            log.warning("worker %s: could not write its registry row (%s)", self.info.id, error.cause)

    def stalled(self) -> bool:
        """No renewal has landed for a whole visibility window: a lease taken now could not be kept."""
        return lease_clock() - self.control.last_renewal >= self.visibility

    async def run(self) -> None:
        control = self.control
        retry_at = -math.inf
        while True:
            held = self.table.leased()
            due = control.last_renewal + self.visibility * IDLE_BEAT_SHARE
            if held:
                due = min(due, min(h.renewed_at for h in held) + self.interval)
            if not control.beat.is_set() and not await self._rest(max(due, retry_at) - lease_clock()):
                continue  # a claim took leases: the schedule may have moved
            control.beat.clear()
            held = self.table.leased()
            asked_at = lease_clock()
            lost = {h.lease.job_id for h in self.lose(held, asked_at)}  # windows closed before this beat
            held = [h for h in held if h.lease.job_id not in lost]  # not renewed: maybe another's lease now
            try:
                beat = await self.renewal(held)
            except WorkhorseError as error:
                now = lease_clock()
                log.warning(
                    "worker %s: lease renewal failed (%s); no renewal landed for %.1fs",
                    self.info.id,
                    error.cause,
                    now - control.last_renewal,
                )
                self.lose(held, now)
                retry_at = now + self.interval / 2
                continue
            paused = self.stalled()  # the claim loop stopped claiming
            control.last_renewal = asked_at
            for h in held:
                h.renewed_at = max(h.renewed_at, asked_at)
            if paused:
                control.wake.set()
            if not beat.registered:
                await self.register()
            for h in held:
                if h.lease.job_id not in beat.held and not h.settled and not h.run.ctx._releasing:
                    self.lost(h)
            if held:
                self.check_body_loop(held)

    def lost(self, h: Held) -> None:
        """A renewal missed this run's row: another worker holds it now, an operator cancelled
        it, or (under a cap) a claim freed its lapsed lease and gave its slot to another run
        (JOB_SLOT_LOST). Either way the run is cancelled and writes nothing."""
        claimed = h.run.claimed
        if self.flow is not None and self.flow.counts(claimed.name, claimed.queue, claimed.tenant):
            log.warning(
                "worker %s: job %s (%s) lost its concurrency slot (JOB_SLOT_LOST): its lease lapsed and a "
                "claim gave the slot to another run; cancelling its body, which writes nothing",
                self.info.id,
                claimed.id,
                claimed.name,
            )
            self.cancel(h, "slot lost")
            return
        log.warning(
            "worker %s: job %s (%s) is no longer ours: cancelling its body", self.info.id, claimed.id, claimed.name
        )
        self.cancel(h, "lease lost")

    async def _rest(self, seconds: float) -> bool:
        """Sleep until the next beat is due (True), or until a cancel asks for one now (True), or
        until a claim took leases (False: compute the schedule again)."""
        control = self.control
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

    def lose(self, held: list[Held], now: float) -> list[Held]:
        """Cancel the runs of ``held`` whose lease window closed by ``now`` with no renewal landed:
        each lease may have lapsed and been claimed by another worker, so the run writes nothing.
        Answers those runs."""
        closed = [h for h in held if now >= h.renewed_at + self.visibility]
        for h in closed:
            claimed = h.run.claimed
            if self.flow is not None and self.flow.counts(claimed.name, claimed.queue, claimed.tenant):
                log.warning(
                    "worker %s: job %s (%s) may have lost its concurrency slot (JOB_SLOT_LOST): no renewal "
                    "landed within its lease window, so a claim may have given the slot to another run; "
                    "cancelling its body, which writes nothing",
                    self.info.id,
                    claimed.id,
                    claimed.name,
                )
                self.cancel(h, "slot lost")
            else:
                self.cancel(h, "lease lost")
        return closed

    async def renewal(self, held: list[Held]) -> Beat:
        """One renewal of ``held``, answered or failed by the time the first of their windows closes.

        The window is measured here, not by the statement: a connection that went silent (a
        half-open TCP session, a stalled server) neither answers nor fails, and the kernel may take
        a quarter of an hour to say so. Its leases lapse on the server meanwhile and another worker
        may claim the jobs, so when a window closes the statement is abandoned (cancelled in the
        background) and the caller is told it failed, which cancels the runs whose window closed.
        Past every window (those runs already cancelled), a renewal gets one beat's time to land,
        so a worker whose database comes back recovers."""
        control = self.control
        call = asyncio.ensure_future(
            control.heartbeat.heartbeat(self.info.id, [h.lease for h in held], self.visibility)
        )
        now = lease_clock()
        closes = [h.renewed_at + self.visibility for h in held if h.renewed_at + self.visibility > now]
        window_left = (min(closes) if closes else control.last_renewal + self.visibility) - now
        try:
            await asyncio.wait({call}, timeout=window_left if window_left > 0 else self.interval)
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
                cause=f"no answer within the visibility window ({self.visibility:g}s)",
                fix="check the network path to PostgreSQL and the server's load; the jobs run again elsewhere",
            )
        return call.result()

    def check_body_loop(self, held: list[Held]) -> None:
        """Warn (at most every 10 s) when the body loop stops answering: an async body blocks it."""
        watch = self.watch
        silent = watch.silent_for()
        now = time.monotonic()
        if silent > LOOP_LAG_WARNING and now - watch.warned_at > 10:
            culprits = sorted({h.run.handle.name for h in held if h.run.handle.is_async and not h.body_done})
            log.warning(
                "worker %s: the event loop running job bodies has not answered for %.1fs; an async body "
                "is blocking it (time.sleep or CPU work?): %s. Its lease is still renewed.",
                self.info.id,
                silent,
                ", ".join(culprits) or "unknown",
            )
            watch.warned_at = now


def _retrieve(call: asyncio.Future[Beat]) -> None:
    if not call.cancelled():
        call.exception()  # an abandoned renewal's error: already reported as unanswered
