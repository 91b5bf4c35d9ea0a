"""The claimer: the claim loop, its back-off, and the hand-back of jobs claimed but never started.

What to claim and when is decided by pure functions over the loop's memory (``ClaimState``), so
the decision can be tested without a database, a loop or a clock:

* ``choose`` — which claim to send: the *lean* claim (due jobs only) or the *full* one, which
  also sweeps lapsed leases and says when the next job or lease comes due. While claims come
  back full the lean one is enough, with a full one at least every SWEEP_EVERY; an idle worker
  woken by a notify for a due job sends the lean claim first (the job starts one statement
  sooner) unless a due time changed meanwhile, a sweep is owed, or the time the last sweep
  named has come.
* ``ClaimState.answered`` — what the answer teaches: when to look next, and whether a lean claim
  that came back short owes a sweep now.
* ``idle_wait`` — how long to sleep when there is nothing to claim.

The loop itself (``Claimer.run``) only carries those decisions out. Claimed runs go to ``take``
(the worker holds and starts them).

Under flow control (``flow``: the app declares caps) every claim is the flow claim, which sweeps
and enforces the caps in its statement: a job over a cap is never claimed, so none is handed
back. When a claim took some jobs and passed others over for a cap (``held_back``), it may have
taken fewer than it could (see ``_db/queries/flow.py``), so the loop claims again at once; when
it took none, the loop rests until a settle frees a slot (a flow worker's settle wakes the
queue), the next due time (a lease that may lapse, a rate window reopening) or the poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workhorse.drivers.wakeups import Wakeups
from workhorse.errors import WorkhorseError
from workhorse.types import Buried, Claimed, ClaimResult, FlowRules, Settlement
from workhorse.worker.clock import lease_clock
from workhorse.worker.execute import NOT_STARTED
from workhorse.worker.records import Control, WorkerStats
from workhorse.worker.table import RunTable

log = logging.getLogger("workhorse.worker")

CLAIM_COALESCE = 0.0005  # seconds a busy worker waits for more slots to free before claiming
HAND_BACK_TRIES = 4  # a drain hands claimed-ahead jobs back within about a second, or leaves them to lapse
SWEEP_EVERY = 1.0  # seconds between full claims (lapsed leases, next due) while every claim is full
BURST_CLAIM_FAILURES = 5  # consecutive failed claims after which a burst run gives up
IDLE_POLL = 30.0  # seconds between safety-net claims while the wake-up session is healthy


@dataclass
class ClaimState:
    """What the claim loop remembers between rounds."""

    full: bool = False  # the last claim came back with every slot it asked for
    owed: bool = False  # a sweep must run next, whatever woke us
    swept_at: float = -math.inf  # monotonic time of the last full claim
    due_at: float | None = None  # when the last full claim said the next job (or lease) comes due

    def answered(self, choice: Choice, *, got: int, wanted: int, now: float, next_due: float | None) -> bool:
        """Record a claim's answer. Answers True when a sweep is owed at once: a lean claim came
        back short, and a sweep was due anyway (stale) or the claim was not a notify's lean wake."""
        if choice.sweep:
            self.owed = False
            self.swept_at = now
            self.due_at = None if next_due is None else now + max(next_due, 0.005)
        self.full = got == wanted
        if not choice.sweep and not self.full and (choice.stale or not choice.lean_wake):
            self.owed = True
            return True
        return False


@dataclass(frozen=True)
class Choice:
    sweep: bool  # the full claim (sweeps lapsed leases, answers the next due time)
    lean_wake: bool  # an idle worker's lean claim for a notify's due job
    stale: bool  # a sweep is due by SWEEP_EVERY


def choose(state: ClaimState, *, now: float, may_rest: bool, notified: bool, due_changed: bool) -> Choice:
    """Which claim to send now (see the module's docstring)."""
    stale = now - state.swept_at >= SWEEP_EVERY
    lean_wake = (
        may_rest
        and notified
        and not due_changed
        and not state.owed
        and not state.full
        and (state.due_at is None or now < state.due_at)
    )
    return Choice(sweep=not lean_wake and (stale or not state.full), lean_wake=lean_wake, stale=stale)


def idle_wait(*, poll: float, free: bool, due_at: float | None, now: float, stalled: bool, beat: float) -> float:
    """Seconds to sleep with nothing to claim: the poll, cut short by the time the last sweep
    named (when a slot is free to take that job), or by half a beat while claiming is paused
    for want of a landed renewal (the heartbeat wakes us when one lands; this is the net)."""
    if free and due_at is not None:
        return min(poll, max(due_at - now, 0.005))
    if not free and stalled:
        return min(poll, beat / 2)
    return poll


class Claimer:
    def __init__(
        self,
        *,
        worker_id: str,
        names: Sequence[str],
        visibility: float,
        poll_interval: float,
        beat: float,
        burst: bool,
        control: Control,
        table: RunTable,
        stats: WorkerStats,
        flow: FlowRules | None,
        accepting: Callable[[], bool],
        stalled: Callable[[], bool],
        take: Callable[[list[Claimed], float], None],
        buried: Callable[[list[Buried]], None],
        refused: Callable[[list[Buried]], None],
        fail: Callable[[BaseException], None],
    ) -> None:
        self.worker_id = worker_id
        self.names = list(names)
        self.visibility = visibility
        self.poll_interval = poll_interval
        self.beat = beat
        self.burst = burst
        self.control = control
        self.table = table
        self.stats = stats
        self.flow = flow
        self.accepting = accepting
        self.stalled = stalled
        self.take = take
        self.buried = buried
        self.refused = refused
        self.fail = fail  # a burst run that cannot claim ends with this error

    def free(self) -> dict[str, int]:
        """Free slots per queue; none while no renewal has landed for a whole window (every run
        was cancelled as lease lost; new ones would be too)."""
        return {} if self.stalled() else self.table.free()

    async def run(self, wakeups: Wakeups | None) -> None:
        control, table = self.control, self.table
        state = ClaimState()
        failures = 0
        forgotten = -1
        # Only an idle worker whose wake-ups say which work is due may sleep through wakes that
        # cannot have made work due for it (a body finishing, a terminal settle): a notify says
        # when a job is due now, and the full claim said when the next delayed one is. A burst
        # run claims on every wake.
        may_rest = wakeups is not None and wakeups.tells_due and not self.burst
        while self.accepting():
            control.wake.clear()
            notified = due_changed = False  # what woke us: a notify for a due job; a changed due time
            if wakeups is not None:
                notified, due_changed = wakeups.take()
            if control.recheck:
                control.recheck, due_changed = False, True
            free = self.free()
            if state.full and 0 < sum(free.values()) < table.total / 2 and table.busy():
                # Busy: a slot or two just freed. Let a few more finish and claim them together.
                await asyncio.sleep(CLAIM_COALESCE)
                free = self.free()
            rested = False
            if free:
                choice = choose(
                    state, now=time.monotonic(), may_rest=may_rest, notified=notified, due_changed=due_changed
                )
                if self.flow is not None:  # the flow claim always sweeps, and says when to look next
                    choice = Choice(sweep=True, lean_wake=choice.lean_wake, stale=choice.stale)
                state.full = False
                forgotten = table.forgotten
                asked_at = lease_clock()  # each lease's window runs from the claim's sending
                try:
                    result = await self._claim(free, choice)
                    failures = 0
                except WorkhorseError as error:
                    failures += 1
                    if wakeups is not None:
                        wakeups.missed()  # whatever woke us is still to be looked at
                    if self.burst and failures >= BURST_CLAIM_FAILURES:
                        self.fail(error)  # a burst run is a batch job: fail it, do not spin
                        break
                    delay = min(30.0, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                    log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.worker_id, error.cause, delay)
                    await self.sleep(delay)
                    continue
                owes_sweep = state.answered(
                    choice,
                    got=len(result.claimed),
                    wanted=sum(free.values()),
                    now=time.monotonic(),
                    next_due=result.next_due,
                )
                if result.buried:
                    self.buried(result.buried)
                if result.refused:
                    self.refused(result.refused)
                if not self.accepting():  # the drain began while this claim was in flight
                    self.stats.claimed += len(result.claimed)
                    await self.hand_back(result.claimed)
                    break
                if result.claimed:
                    self.start(result.claimed, asked_at)
                if not self.accepting():
                    break
                if owes_sweep:
                    continue  # a lean claim came back short and a sweep is due: sweep now, learn when to look next
                if result.held_back and result.claimed and self.free():
                    continue  # a cap passed some over and may have cost others their turn: claim again
                rested = may_rest and not state.full
            if state.full:
                if not self.free():
                    await self.sleep(self.poll_interval)  # woken when a slot frees
                continue  # more may be due right now: claim again as soon as a slot is free
            if self.burst and free and table.idle() and table.forgotten == forgotten:
                # Nothing held, and no settle landed while the last claim ran (it may have missed a
                # job that settle handed back): the queue has nothing due for us.
                break
            healthy = wakeups is not None and wakeups.healthy
            poll = max(self.poll_interval, IDLE_POLL) if healthy else self.poll_interval
            wait = idle_wait(
                poll=poll,
                free=bool(free),
                due_at=state.due_at,
                now=time.monotonic(),
                stalled=self.stalled(),
                beat=self.beat,
            )
            if not rested:
                await self.sleep(wait)
                continue
            await self.rest(wakeups, wait)

    async def _claim(self, free: dict[str, int], choice: Choice) -> ClaimResult:
        claim = self.control.claim.claim
        if self.flow is None:  # no flow argument: a driver of the user's may not take one
            return await claim(
                worker_id=self.worker_id, wants=free, names=self.names, visibility=self.visibility, sweep=choice.sweep
            )
        return await claim(
            worker_id=self.worker_id, wants=free, names=self.names, visibility=self.visibility, flow=self.flow
        )

    async def rest(self, wakeups: Wakeups | None, wait: float) -> None:
        """Nothing more was due when the claim came back short: sleep until a notify, the time the
        last sweep named, or a settle that may have made work due (a retry, a suspension)."""
        control = self.control
        deadline = time.monotonic() + wait
        while True:
            await self.sleep(deadline - time.monotonic())
            if (
                not self.accepting()
                or control.recheck
                or wakeups is None
                or wakeups.pending()
                or not wakeups.healthy
                or time.monotonic() >= deadline
            ):
                return
            control.wake.clear()

    def start(self, claimed: list[Claimed], asked_at: float) -> None:
        """Into the worker: held, then started as slots allow."""
        self.take(claimed, asked_at)

    async def sleep(self, seconds: float) -> None:
        wake = self.control.wake
        if wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):  # no task per wait, unlike wait_for: a notify's claim starts sooner
                await wake.wait()

    async def hand_back(self, claimed: list[Claimed]) -> None:
        """Return jobs claimed but never started, unspent. Tried HAND_BACK_TRIES times over about a
        second (a drain should not wait longer); a miss is not a loss, but the jobs wait for their
        leases to lapse and the claim that takes them back spends an attempt."""
        if not claimed:
            return
        settlements = [Settlement(c.id, self.worker_id, c.claims, "interrupted", reason=NOT_STARTED) for c in claimed]
        for tries in range(1, HAND_BACK_TRIES + 1):
            try:
                landed = await self.control.settle.settle(settlements)
                break
            except WorkhorseError as error:
                if tries == HAND_BACK_TRIES:
                    log.warning(
                        "worker %s: could not hand back %d job(s) claimed ahead (%s); they run again once "
                        "their leases lapse",
                        self.worker_id,
                        len(claimed),
                        error.cause,
                    )
                    return
                await asyncio.sleep(0.1 * 2**tries * random.uniform(0.5, 1.0))
        self.stats.interrupted += sum(landed)
