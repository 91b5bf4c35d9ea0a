"""The worker: claims due jobs, runs their bodies, keeps their leases, settles their outcomes.

Two event loops, on purpose. Job bodies run on the loop that called ``run()`` (the *body loop*;
plain ``def`` bodies go to a bounded thread pool from there). Everything that keeps a claim
alive — claiming, lease renewal, settling — runs on a *control loop* in its own thread with its
own connections. An ``async def`` body that blocks its loop with ``time.sleep`` or CPU work
therefore cannot starve its own heartbeat: the lease keeps being renewed, no second worker runs
the job meanwhile, and the control loop logs a warning naming the body that blocked.

A lease is held, not owned. Each renewal is one statement for every held job, fenced on the
claim. A job missing from the answer was taken from us (cancelled by an operator, or re-claimed
after our lease lapsed): its body is cancelled and nothing it produces is written. Each lease's
window runs from the statement that last set it (its claim, then each landed renewal); one failed
renewal is tried again within it. When a window closes with no renewal landed (the database is
unreachable, or the renewal's connection went silent and never answers), the worker assumes the
lease lost and cancels that run, and it claims nothing more until a renewal lands again.

Drain (``stop()``, SIGTERM, SIGINT): claiming stops at once; running jobs continue to their end
or to the drain cut-off (``drain_timeout``, 25 s by default; a second signal cuts off at once);
at the cut-off their bodies are cancelled and their rows handed back ``ready`` without spending
the attempt (counted as ``interrupted``). Leases keep being renewed throughout the drain.

A run that suspends (``ctx.step.sleep``, ``ctx.step.wait_for_event``) leaves the worker at once:
its step statement already wrote the row ``suspended`` (fenced on the claim), so the slot frees
with nothing to settle (counted as ``suspended``), and a later claim resumes it from its steps.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import random
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from workhorse._runtime.clock import lease_clock
from workhorse._runtime.execute import Run, Verdict, execute
from workhorse._runtime.heartbeat import heartbeat_loop, register
from workhorse._runtime.listener import Listener
from workhorse._runtime.settler import announce_buried, settle_loop
from workhorse._runtime.state import Control, Held, WorkerStats
from workhorse.context import PROGRESS_INTERVAL, JobContext
from workhorse.drivers.base import Claimed, Driver, Lease, Settlement, StepFence
from workhorse.drivers.memory import MemoryDriver
from workhorse.drivers.postgres import jobs_channel
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError, WorkhorseError

if TYPE_CHECKING:
    from workhorse.app import App

__all__ = ["Worker", "WorkerStats"]  # WorkerStats lives in _runtime/state.py; its public home is here

log = logging.getLogger("workhorse.worker")

CLAIM_COALESCE = 0.0005  # seconds a busy worker waits for more slots to free before claiming
PREFETCH_BELOW = 0.05  # seconds: bodies shorter than this on average let the worker claim ahead
PREFETCH_WINDOW = 0.1  # seconds of work a worker may hold claimed ahead of its slots
PREFETCH_MAX = 30  # and never more than this many times its slots (with 1 ms bodies: 30 ms of wall work)
# Finished runs waiting for their settle, in multiples of the slots, beyond which the worker stops
# claiming: a settle connection that is slow or down must not let it take leases it cannot settle.
# Short bodies keep a few settle batches in flight (each lingers, then takes a round trip), so a
# bound of one batch of slots would stall the claims behind every settle.
SETTLE_BACKLOG = 10
HAND_BACK_TRIES = 4  # a drain hands claimed-ahead jobs back within about a second, or leaves them to lapse
SWEEP_EVERY = 1.0  # seconds between full claims (lapsed leases, next due) while every claim is full
BURST_CLAIM_FAILURES = 5  # consecutive failed claims after which a burst run gives up
IDLE_POLL = 30.0  # seconds between safety-net claims while the LISTEN session is healthy


class Worker:
    """Runs the app's jobs. Use ``await worker.run()``; ``await worker.stop()`` drains it."""

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | dict[str, int] = 10,
        visibility_timeout: Duration = "30s",
        poll_interval: Duration = "2s",
        drain_timeout: Duration = "25s",
        sync_threads: int | None = None,
        handle_signals: bool = True,
    ) -> None:
        self.app = app
        known_queues = sorted({h.queue for h in app.jobs.values()})
        if queues is not None and (isinstance(queues, str) or not all(isinstance(q, str) and q for q in queues)):
            raise ConfigurationError(
                cause=f"queues expected a list of queue names, got {queues!r}",
                fix="app.worker(queues=['default', 'emails'])",
            )
        self.queues = list(queues) if queues is not None else known_queues
        if not self.queues:
            raise ConfigurationError(
                code="WORKER_NO_QUEUES",
                cause="the worker has no queue to claim from: no job is declared on this app and no queues= given",
                fix="declare jobs with @app.job before creating the worker, or pass --app module:app to the CLI",
            )
        self.concurrency = self._read_concurrency(concurrency)
        self.visibility = to_seconds(visibility_timeout, what="visibility_timeout", allow_zero=False)
        if self.visibility < 1:
            raise ConfigurationError(
                cause=f"visibility_timeout must be at least 1s (a lease shorter than a round trip would "
                f"lapse under load), got {visibility_timeout!r}",
                fix="app.worker(visibility_timeout='30s')",
            )
        self.poll_interval = to_seconds(poll_interval, what="poll_interval", allow_zero=False)
        self.drain_timeout = to_seconds(drain_timeout, what="drain_timeout")
        self.heartbeat_interval = max(min(self.visibility / 3, 10.0), 0.2)
        self.handle_signals = handle_signals
        self._total = sum(self.concurrency.values())
        self.sync_threads = sync_threads or self._total
        self.id = f"w-{uuid.uuid4().hex[:16]}"  # a fresh incarnation per process, never the hostname
        self.stats = WorkerStats()
        self._names = sorted(h.name for h in app.jobs.values() if h.queue in self.queues)
        self._held: dict[str, Held] = {}
        self._forgotten = 0  # runs fully let go of; a burst ends only if none was since its last claim
        self._recheck = False  # a run ended in a way that may have made work due (retry, suspension...)
        self._pool: ThreadPoolExecutor | None = None
        self._outbox: collections.deque[Callable[[], None]] = collections.deque()  # body loop -> control loop
        self._outbox_armed = False
        self._posts: list[Callable[[], None]] = []  # gathered on the body loop, flushed once a turn
        self._posts_flushing = False
        self._busy: dict[str, int] = dict.fromkeys(self.queues, 0)  # bodies running, per queue
        # Claimed ahead of a free slot (short jobs only, see _prefetch), started as slots free.
        self._buffer: dict[str, collections.deque[Held]] = {q: collections.deque() for q in self.queues}
        self._runtime = math.inf  # moving average of body run time, seconds; decides prefetching
        self._lock = threading.Lock()  # guards _held and _busy across the two loops
        self._accepting = True
        self._stopped = asyncio.Event()
        self._control: Control | None = None
        self._progress_due: list[Held] = []  # runs with a report to write (control loop)
        self._body_loop: asyncio.AbstractEventLoop | None = None
        self._drain_deadline: float | None = None
        self._burst = False
        self._signals = 0
        self._running = False

    def _read_concurrency(self, concurrency: int | dict[str, int]) -> dict[str, int]:
        def check(value: Any, what: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise ConfigurationError(
                    cause=f"{what} expected a whole number from 1 to 10000, got {value!r}",
                    fix="app.worker(concurrency=10)   # or {'emails': 5, 'default': 10}",
                )
            return value

        if isinstance(concurrency, dict):
            for queue in concurrency:
                if queue not in self.queues:
                    raise ConfigurationError(
                        cause=f"concurrency names queue {queue!r}, which this worker does not claim from "
                        f"({', '.join(self.queues)})",
                        fix="name only queues the worker runs, or add it to queues=",
                    )
            default = 10
            return {
                q: check(concurrency[q], f"concurrency[{q!r}]") if q in concurrency else default for q in self.queues
            }
        value = check(concurrency, "concurrency")
        return dict.fromkeys(self.queues, value)

    # -- public lifecycle -------------------------------------------------------------------------

    async def run(self, *, burst: bool = False) -> WorkerStats:
        """Work until ``stop()`` or a signal (then drain); with ``burst``, until nothing is due."""
        if self._running:
            raise ConfigurationError(
                code="WORKER_RUNNING",
                cause="this worker is already running",
                fix="create a second worker with app.worker() instead",
            )
        self._running = True
        self._burst = burst
        self._body_loop = asyncio.get_running_loop()
        if not self.app.is_memory:
            await self.app.driver.check_schema()
        pool = ThreadPoolExecutor(max_workers=self.sync_threads, thread_name_prefix=f"workhorse-{self.id}")
        self._pool = pool
        ready = threading.Event()
        thread = threading.Thread(
            target=self._control_main, args=(ready,), name=f"workhorse-control-{self.id}", daemon=True
        )
        installed = self._install_signals() if self.handle_signals else []
        thread.start()
        try:
            try:
                await self._stopped.wait()
            except asyncio.CancelledError:
                # run() itself was cancelled (Ctrl-C in asyncio.run, a task group tearing down):
                # hand every running job back now, then let the cancellation through.
                self._begin_drain(cut_off=True)
                await asyncio.shield(self._stopped.wait())
                raise
        finally:
            for sig in installed:
                self._body_loop.remove_signal_handler(sig)
            await asyncio.to_thread(thread.join)
            pool.shutdown(wait=False, cancel_futures=True)
            self._running = False
        if self._failure is not None:
            raise self._failure
        return self.stats

    async def stop(self, *, cut_off: bool = False) -> None:
        """Drain: stop claiming, let running jobs finish up to ``drain_timeout``, then return."""
        self._begin_drain(cut_off=cut_off)
        await self._stopped.wait()

    _failure: BaseException | None = None

    def _install_signals(self) -> list[signal.Signals]:
        assert self._body_loop is not None
        installed: list[signal.Signals] = []
        if threading.current_thread() is not threading.main_thread():
            return installed
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._body_loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
                pass
        return installed

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        log.warning(
            "worker %s: %s received, %s",
            self.id,
            sig.name,
            "draining" if self._signals == 1 else "cutting off the drain now",
        )
        self._begin_drain(cut_off=self._signals > 1)

    def _begin_drain(self, *, cut_off: bool) -> None:
        """Thread-safe: flip to draining and arm the cut-off."""
        with self._lock:
            self._accepting = False
            deadline = time.monotonic() + (0 if cut_off else self.drain_timeout)
            if self._drain_deadline is None or deadline < self._drain_deadline:
                self._drain_deadline = deadline
        control = self._control
        if control is not None:
            control.loop.call_soon_threadsafe(control.wake.set)

    # -- the control thread -------------------------------------------------------------------

    def _control_main(self, ready: threading.Event) -> None:
        try:
            asyncio.run(self._control_run(ready))
        except BaseException as error:
            self._failure = error
            log.exception("worker %s: control loop failed", self.id)
        finally:
            assert self._body_loop is not None
            with contextlib.suppress(RuntimeError):  # the body loop may already be closed
                self._body_loop.call_soon_threadsafe(self._stopped.set)

    def _drivers(self) -> tuple[Driver, Driver, Driver]:
        if self.app.is_memory:
            driver = self.app.driver
            return driver, driver, driver
        return (
            self.app.postgres_driver("claim", max_size=1, generic_plans=True),
            self.app.postgres_driver("settle", max_size=1, generic_plans=True),
            self.app.postgres_driver("heartbeat", max_size=1, generic_plans=True),
        )

    async def _control_run(self, ready: threading.Event) -> None:
        claim, settle, heartbeat = self._drivers()
        control = Control(
            loop=asyncio.get_running_loop(),
            claim=claim,
            settle=settle,
            heartbeat=heartbeat,
            wake=asyncio.Event(),
            settles=asyncio.Queue(),
        )
        self._control = control
        listener = None
        unsubscribe = None
        if not self.app.is_memory:
            listener = Listener(
                self.app.database_url, jobs_channel(self.app.schema), self.queues, control.wake, beat=control.beat
            )
            listener.start()
        elif isinstance(claim, MemoryDriver):  # the in-process stand-in for NOTIFY: enqueue and publish wake us

            def wake() -> None:
                control.loop.call_soon_threadsafe(control.wake.set)

            def beat() -> None:
                control.loop.call_soon_threadsafe(control.beat.set)

            unsubscribe = claim.subscribe(wake, on_cancel=beat)
        await register(self, control)
        ready.set()
        log.info(
            "worker %s: claiming from %s",
            self.id,
            ", ".join(f"{q}({n})" for q, n in self.concurrency.items()),
        )
        tasks = [
            asyncio.create_task(self._kept(lambda: settle_loop(self, control), "settle"), name="settle"),
            asyncio.create_task(self._kept(lambda: heartbeat_loop(self, control), "heartbeat"), name="heartbeat"),
            asyncio.create_task(self._kept(lambda: self._progress_loop(control), "progress"), name="progress"),
        ]
        try:
            await self._claim_loop(control, listener)
            await self._drain(control)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if listener is not None:
                await listener.stop()
            if unsubscribe is not None:
                unsubscribe()
            with contextlib.suppress(WorkhorseError):
                await control.heartbeat.deregister_worker(self.id)
            for driver in {id(d): d for d in (claim, settle, heartbeat)}.values():
                if not self.app.is_memory:
                    await driver.close()

    async def _kept(self, loop: Callable[[], Awaitable[None]], name: str) -> None:
        """Run one of the control loop's own loops for as long as the worker runs. Each handles the
        errors it expects (a failed statement); anything else is a defect, logged with its
        traceback, and the loop starts again a quarter of a beat later (at most a second): a
        heartbeat that died quietly would let every lease lapse under running bodies."""
        while True:
            try:
                await loop()
            except Exception:
                pause = min(1.0, self.heartbeat_interval / 4)
                log.exception("worker %s: the %s loop failed; starting it again in %.2fs", self.id, name, pause)
                await asyncio.sleep(pause)
            else:
                return

    def _free(self) -> dict[str, int]:
        """Free slots per queue; none while SETTLE_BACKLOG times as many finished runs as the
        worker has slots still wait for their settle (the settle connection is slow or down: do
        not pile up more), and none while no lease renewal has landed for a whole visibility
        window (every run was cancelled as lease lost; new ones would be too)."""
        if self._renewals_stalled():
            return {}  # no renewal landed for a whole window: a lease taken now could not be kept
        with self._lock:
            unsettled = sum(1 for h in self._held.values() if h.slot_released and not h.settled)
            if unsettled >= self._total * SETTLE_BACKLOG:
                return {}
            room = {
                q: self.concurrency[q] + self._prefetch(q) - self._busy[q] - len(self._buffer[q]) for q in self.queues
            }
            return {q: n for q, n in room.items() if n > 0}

    def _renewals_stalled(self) -> bool:
        """No lease renewal has landed for a whole visibility window (by the lease clock)."""
        control = self._control
        return control is not None and lease_clock() - control.last_renewal >= self.visibility

    def _prefetch(self, queue: str) -> int:
        """Jobs this worker may claim ahead of a free slot: about PREFETCH_WINDOW of work at the
        observed body run time, at most PREFETCH_MAX times the slots, and none unless bodies are
        short (under PREFETCH_BELOW on average). Bigger claims mean fewer round trips per job, and
        a buffered job waits milliseconds; long jobs are never held back from an idle worker."""
        if self._runtime >= PREFETCH_BELOW:
            return 0
        slots = self.concurrency[queue]
        return min(slots * PREFETCH_MAX, int(slots * PREFETCH_WINDOW / max(self._runtime, 1e-4)))

    def _slots_busy(self) -> int:
        with self._lock:
            return sum(self._busy.values())

    async def _claim_loop(self, control: Control, listener: Listener | None) -> None:
        failures = 0
        full = False
        forgotten = -1
        swept_at = -math.inf
        owed = False  # a sweep must run next, whatever woke us
        due_at: float | None = None  # when the last full claim said the next job (or lease) comes due
        sweep = True
        # Only an idle worker whose LISTEN is up may sleep through wakes that cannot have made work
        # due for it (a body finishing, a terminal settle): a notify says when a job is due now, and
        # the full claim said when the next delayed one is. A burst run claims on every wake.
        may_rest = listener is not None and not self._burst
        while self._accepting:
            control.wake.clear()
            notified = swept_hint = False  # what woke us: a notify for a due job; a changed due time
            if listener is not None:
                notified, swept_hint = listener.due, listener.sweep
                listener.due = listener.sweep = False
            if self._recheck:
                self._recheck, swept_hint = False, True
            free = self._free()
            if full and 0 < sum(free.values()) < self._total / 2 and self._slots_busy():
                # Busy: a slot or two just freed. Let a few more finish and claim them together.
                await asyncio.sleep(CLAIM_COALESCE)
                free = self._free()
            rested = False
            if free:
                # While every claim comes back full, the lean claim (due jobs only) is enough; the
                # full one also sweeps lapsed leases and says when to look next: at least once a
                # second. An idle worker woken by a notify for a due job runs the lean claim first
                # (the job starts one statement sooner; a sweep, when one is owed, follows it at
                # once) unless a due time changed meanwhile or the time the last sweep named came.
                now = time.monotonic()
                stale = now - swept_at >= SWEEP_EVERY
                lean_wake = (
                    may_rest
                    and notified
                    and not swept_hint
                    and not owed
                    and not full
                    and (due_at is None or now < due_at)
                )
                sweep = not lean_wake and (stale or not full)
                full = False
                forgotten = self._forgotten
                asked_at = lease_clock()  # each lease's window runs from the claim's sending
                try:
                    result = await control.claim.claim(
                        worker_id=self.id, wants=free, names=self._names, visibility=self.visibility, sweep=sweep
                    )
                    failures = 0
                    if sweep:
                        owed = False
                        swept_at = time.monotonic()
                        due_at = None if result.next_due is None else swept_at + max(result.next_due, 0.005)
                except WorkhorseError as error:
                    failures += 1
                    if listener is not None:
                        listener.sweep = True  # whatever woke us is still to be looked at
                    if self._burst and failures >= BURST_CLAIM_FAILURES:
                        self._failure = error  # a burst run is a batch job: fail it, do not spin
                        self._begin_drain(cut_off=False)
                        break
                    delay = min(30.0, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                    log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.id, error.cause, delay)
                    await self._sleep_or_wake(control, delay)
                    continue
                if result.buried:
                    announce_buried(self, result.buried)
                if not self._accepting:  # the drain began while this claim was in flight
                    self.stats.claimed += len(result.claimed)
                    await self._hand_back(control, result.claimed)
                    break
                if result.claimed:
                    self._start(control, result.claimed, asked_at)
                full = len(result.claimed) == sum(free.values())
                if not self._accepting:
                    break
                if not sweep and not full and (stale or not lean_wake):
                    owed = True  # a lean claim came back short and a sweep is due: sweep now, learn when to look next
                    continue
                rested = may_rest and not full
            if full:
                if not self._free():
                    await self._sleep_or_wake(control, self.poll_interval)  # woken when a slot frees
                continue  # more may be due right now: claim again as soon as a slot is free
            if self._burst and free and self._idle() and self._forgotten == forgotten:
                # Nothing held, and no settle landed while the last claim ran (it may have missed a
                # job that settle handed back): the queue has nothing due for us.
                self._begin_drain(cut_off=False)
                break
            wait = self._poll_delay(listener)
            if free and due_at is not None:
                wait = min(wait, max(due_at - time.monotonic(), 0.005))
            elif not free and self._renewals_stalled():
                # Claiming is paused until a renewal lands; the heartbeat wakes us when one does,
                # and we look again every half beat in case that wake-up is missed.
                wait = min(wait, self.heartbeat_interval / 2)
            if not rested:
                await self._sleep_or_wake(control, wait)
                continue
            # Nothing more was due when the claim came back short: sleep until a notify, the time
            # the last sweep named, or a settle that may have made work due (a retry, a suspension).
            deadline = time.monotonic() + wait
            while True:
                await self._sleep_or_wake(control, deadline - time.monotonic())
                if (
                    not self._accepting
                    or self._recheck
                    or listener is None
                    or listener.due
                    or listener.sweep
                    or not listener.healthy
                    or time.monotonic() >= deadline
                ):
                    break
                control.wake.clear()

    async def _hand_back(self, control: Control, claimed: list[Claimed]) -> None:
        """Return jobs claimed but never started, unspent. Tried HAND_BACK_TRIES times over about a
        second (a drain should not wait longer); a miss is not a loss, but the jobs wait for their
        leases to lapse and the claim that takes them back spends an attempt."""
        if not claimed:
            return
        settlements = [Settlement(c.id, self.id, c.claims, "interrupted") for c in claimed]
        for tries in range(1, HAND_BACK_TRIES + 1):
            try:
                landed = await control.settle.settle(settlements)
                break
            except WorkhorseError as error:
                if tries == HAND_BACK_TRIES:
                    log.warning(
                        "worker %s: could not hand back %d job(s) claimed ahead (%s); they run again once "
                        "their leases lapse",
                        self.id,
                        len(claimed),
                        error.cause,
                    )
                    return
                await asyncio.sleep(0.1 * 2**tries * random.uniform(0.5, 1.0))
        self.stats.interrupted += sum(landed)

    def _poll_delay(self, listener: Listener | None) -> float:
        """Poll rarely while LISTEN is healthy (a notify wakes us, and the claim itself says when
        the next delayed job or lease comes due); otherwise every ``poll_interval``."""
        if listener is not None and listener.healthy:
            return max(self.poll_interval, IDLE_POLL)
        return self.poll_interval

    def _idle(self) -> bool:
        with self._lock:
            return not self._held

    async def _sleep_or_wake(self, control: Control, seconds: float) -> None:
        if control.wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):  # no task per wait, unlike wait_for: a notify's claim starts sooner
                await control.wake.wait()

    def _start(self, control: Control, claimed: list[Claimed], asked_at: float) -> None:
        """Take a claimed batch into the worker: its runs start as far as slots allow, the rest wait
        in the buffer (holding their leases, taken when the claim was sent) until a slot frees."""
        with self._lock:
            was_idle = all(h.settled for h in self._held.values())  # as the heartbeat counts "held"
        for c in claimed:
            self._buffer[c.queue].append(self._hold(c, asked_at))
        self.stats.claimed += len(claimed)
        if was_idle:  # the heartbeat slept on the idle schedule; leases held already set an earlier beat
            control.leased.set()
        self._fill(control)

    def _fill(self, control: Control) -> None:
        """Start buffered runs into free slots, handed to the body loop in ONE wake-up."""
        starting: list[Held] = []
        with self._lock:
            for queue, waiting in self._buffer.items():
                while waiting and self._busy[queue] < self.concurrency[queue]:
                    held = waiting.popleft()
                    self._busy[queue] += 1
                    held.run.started = time.monotonic()
                    starting.append(held)
        if starting:
            assert self._body_loop is not None
            self._body_loop.call_soon_threadsafe(self._spawn, control, starting)

    def _hold(self, claimed: Claimed, asked_at: float) -> Held:
        handle = self.app.jobs[claimed.name]
        ctx = JobContext(
            id=claimed.id,
            name=claimed.name,
            queue=claimed.queue,
            tenant=claimed.tenant,
            attempt=claimed.attempt,
            max_attempts=claimed.max_attempts,
            worker_id=self.id,
            logger=handle.logger,
        )
        held = Held(
            run=Run(claimed=claimed, handle=handle, ctx=ctx, started=time.monotonic()),
            lease=Lease(claimed.id, claimed.claims),
            slot_queue=claimed.queue,
            worker=self,
            renewed_at=asked_at,
            thread_alive=not handle.is_async,
        )
        ctx._hooks = held
        with self._lock:
            self._held[claimed.id] = held
        return held

    def _spawn(self, control: Control, helds: list[Held]) -> None:
        """On the body loop: one task per run; each verdict goes back through the outbox."""
        loop = asyncio.get_running_loop()
        for held in helds:
            task = loop.create_task(self._execute(control, held), name=f"workhorse:{held.run.handle.name}")
            task.add_done_callback(functools.partial(self._ran, control, held))

    def _ran(self, control: Control, held: Held, task: asyncio.Task[Verdict]) -> None:
        verdict = Verdict(None)
        if task.cancelled():
            log.error("worker %s: the run of job %s was cancelled outside the worker", self.id, held.lease.job_id)
        elif task.exception() is not None:
            log.error("worker %s: executor failed for job %s: %r", self.id, held.lease.job_id, task.exception())
        else:
            verdict = task.result()
        self._post(control, functools.partial(self._body_finished, control, held, verdict))

    def _post(self, control: Control, call: Callable[[], None]) -> None:
        """From the body loop: run ``call`` on the control loop. Calls posted in one turn of the
        body loop are gathered and cross to the control loop together, in one wake-up."""
        self._posts.append(call)
        if not self._posts_flushing:
            self._posts_flushing = True
            asyncio.get_running_loop().call_soon(self._flush_posts, control)

    def _flush_posts(self, control: Control) -> None:
        self._posts_flushing = False
        self._outbox.extend(self._posts)
        self._posts.clear()
        if not self._outbox_armed:
            self._outbox_armed = True
            control.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        self._outbox_armed = False  # first: a call appended from now on arms a new delivery
        while self._outbox:
            self._outbox.popleft()()
        if self._control is not None and self._accepting:
            self._fill(self._control)

    async def _execute(self, control: Control, held: Held) -> Verdict:
        def thread_exit() -> None:
            self._post(control, functools.partial(self._thread_exited, control, held))

        def lease_open() -> bool:
            waited = lease_clock() - held.renewed_at
            if waited < self.visibility:
                return True
            log.warning(
                "worker %s: job %s (%s) not started: its lease window closed %.1fs after its claim, before "
                "its turn came (was this process frozen?); it runs again once its lease lapses",
                self.id,
                held.lease.job_id,
                held.run.handle.name,
                waited,
            )
            return False

        assert self._pool is not None
        return await execute(held.run, self._pool, thread_exit, lease_open)

    def _body_finished(self, control: Control, held: Held, verdict: Verdict) -> None:
        held.body_done = True
        if held.run.task is not None:  # the body ran (a run cancelled before its turn never started)
            took = time.monotonic() - held.run.started
            self._runtime = took if math.isinf(self._runtime) else self._runtime * 0.9 + took * 0.1
        self._release(control, held)
        if verdict.suspended or verdict.outcome is None:
            self._recheck = True  # its row may be due again, or due later: the next claim sweeps
        if verdict.suspended:
            self.stats.suspended += 1
            self._forget(control, held)
            return
        if verdict.outcome is None:
            if held.run.reasons and held.run.reasons[0] != "cancelled":
                self.stats.lease_lost += 1
            self._forget(control, held)
            return
        control.settles.put_nowait((held, verdict))

    def _thread_exited(self, control: Control, held: Held) -> None:
        held.thread_alive = False
        self._release(control, held)

    def _forget(self, control: Control, held: Held) -> None:
        held.settled = True
        self._release(control, held)

    def _release(self, control: Control, held: Held) -> None:
        """The slot frees as soon as the body returned (and its thread, for a sync body): the
        settle follows on its own, fenced, while the next job already runs. The lease is kept
        (and renewed) until the settle lands."""
        with self._lock:
            if not held.slot_released and held.body_done and not held.thread_alive:
                held.slot_released = True
                self._busy[held.slot_queue] -= 1
            if held.settled and held.slot_released and self._held.get(held.lease.job_id) is held:
                del self._held[held.lease.job_id]
                self._forgotten += 1
        control.wake.set()

    # -- progress -----------------------------------------------------------------------------

    def _progress_requested(self, held: Held) -> None:
        """From the body (its loop or its thread): the run has a report to write. ``JobContext.progress``
        asks once per report taken, so a chatty body costs one call here per write, not per report."""
        control = self._control
        if control is not None:
            with contextlib.suppress(RuntimeError):  # the control loop already closed: the settle wrote it
                control.loop.call_soon_threadsafe(self._progress_arm, control, held)

    def _progress_arm(self, control: Control, held: Held) -> None:
        self._progress_due.append(held)
        control.progress.set()

    async def _progress_loop(self, control: Control) -> None:
        """Every run's newest report in ONE fenced statement, at most once a second (so at most one
        write a second per job). A run whose body returned is skipped: its settle writes the report."""
        while True:
            await control.progress.wait()
            control.progress.clear()
            due, self._progress_due = self._progress_due, []
            reports = [
                (StepFence(h.lease.job_id, self.id, h.lease.claims), text)
                for h in due
                if (text := h.run.ctx.take_progress()) is not None and not h.body_done
            ]
            if reports:
                try:
                    await control.settle.record_progress(reports)
                except WorkhorseError as error:  # advisory: the next report, or the settle, writes it again
                    log.warning("worker %s: %d progress report(s) not written (%s)", self.id, len(reports), error.cause)
            await asyncio.sleep(PROGRESS_INTERVAL)

    # -- leases (the heartbeat: _runtime/heartbeat.py; settling: _runtime/settler.py) -----------

    def _cancel_run(self, held: Held, reason: str) -> None:
        assert self._body_loop is not None
        self._body_loop.call_soon_threadsafe(held.run.cancel, reason)

    # -- the drain ----------------------------------------------------------------------------

    async def _drain(self, control: Control) -> None:
        with self._lock:  # jobs claimed ahead and never started go straight back, unspent
            waiting = [held for queue in self._buffer.values() for held in queue]
            for queue in self._buffer.values():
                queue.clear()
        if waiting:
            await self._hand_back(control, [held.run.claimed for held in waiting])
            for held in waiting:
                held.body_done, held.thread_alive, held.slot_released = True, False, True  # never took a slot
                self._forget(control, held)
        cut = False
        while True:
            with self._lock:
                pending = [h for h in self._held.values() if not h.settled]
                deadline = self._drain_deadline
            if not pending:
                break
            if not cut and deadline is not None and time.monotonic() >= deadline:
                cut = True
                log.warning("worker %s: drain cut-off: handing %d running job(s) back unspent", self.id, len(pending))
                for h in pending:
                    self._cancel_run(h, "drain")
            remaining = math.inf if deadline is None else max(deadline - time.monotonic(), 0.05)
            await self._sleep_or_wake(control, min(remaining, 0.25) if not cut else 0.1)
            control.wake.clear()
        log.info("worker %s: drained (%s)", self.id, self.stats.as_dict())
