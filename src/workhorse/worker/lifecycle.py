"""The worker's lifecycle and wiring: claims due jobs, runs their bodies, keeps their leases,
settles their outcomes. The only module of the worker that sees the ``App``.

Design: docs/how-it-works/architecture.md, docs/how-it-works/leases.md, docs/guides/workers.md
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from workhorse._service import Service, install_stop_signals, remove_stop_signals
from workhorse.context import JobContext
from workhorse.deps import dependencies_of
from workhorse.drivers.base import Driver, RescueRole
from workhorse.drivers.wakeups import WakeupSource
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError, DatabaseError, WorkhorseError
from workhorse.hooks import OUTCOME_KINDS, Hooks, LifecycleEvent
from workhorse.jobs import JobHandle
from workhorse.leader.rescue import rescue_every, rescue_interval
from workhorse.limits.rules import Limits, rules_for
from workhorse.logs import JobLogger
from workhorse.types import Claimed, Lease, WorkerInfo
from workhorse.worker.bridge import Bridge
from workhorse.worker.claimer import Claimer
from workhorse.worker.execute import Run, Verdict
from workhorse.worker.heartbeat import Heartbeat
from workhorse.worker.progress import Progress
from workhorse.worker.records import Control, Held, WorkerStats
from workhorse.worker.settler import Settler
from workhorse.worker.table import RunTable
from workhorse.worker.unknown import UnknownNames

if TYPE_CHECKING:
    from workhorse.webhooks.policy import WebhookPolicy

log = logging.getLogger("workhorse.worker")
# Seconds a drain waits after its cut-off for the settles still in flight; then it stops without them
# (a lock held on their rows, a database that stopped answering): a second SIGTERM ends the process.
SETTLE_GRACE = 3.0


class App(Protocol):
    """What a worker needs of its ``workhorse.App`` (the app hands itself over in ``app.worker()``;
    this module never imports ``workhorse.app``)."""

    @property
    def jobs(self) -> Mapping[str, JobHandle[Any]]:
        """Every declared job, by name."""
        ...

    @property
    def is_memory(self) -> bool: ...

    @property
    def hooks(self) -> Hooks:
        """The app's lifecycle-event subscribers (``workhorse.hooks``)."""
        ...

    @property
    def limits(self) -> Limits | None:
        """The app-wide flow limits (``App(limits=)``)."""
        ...

    @property
    def driver(self) -> Driver:
        """The driver for the calling event loop."""
        ...

    @property
    def webhook_policy(self) -> WebhookPolicy | None:
        """``App(webhooks=)``: its request timeout must fit in the drain."""
        ...

    def postgres_driver(self, role: str, *, max_size: int = 10, generic_plans: bool = False) -> Driver:
        """A fresh Postgres driver whose connections are named ``workhorse:<role>``."""
        ...


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
        self.sync_threads = sync_threads or sum(self.concurrency.values())
        self.id = f"w-{uuid.uuid4().hex[:16]}"  # a fresh incarnation per process, never the hostname
        self.stats = WorkerStats()
        # Every declared job: a run may sit on another queue than its declaration's (enqueue(queue=)).
        self._names = sorted(app.jobs)
        # A job claimed ahead starts a moment after its claim stamped it: under a rate, none is.
        self._table = RunTable(self.concurrency, claim_ahead=app.limits is None or app.limits.rate_per_tenant is None)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # guards _accepting and _drain_deadline (any thread may begin a drain)
        self._accepting = True
        self._stopped = asyncio.Event()
        self._control: Control | None = None
        self._body_loop: asyncio.AbstractEventLoop | None = None
        self._drain_deadline: float | None = None
        self._burst = False
        self._service = Service("worker", code="WORKER_RUNNING", fix="create a second worker with app.worker() instead")
        self._rescue_deferred: Callable[[], bool] | None = None  # defer_rescue
        self.flow = rules_for(app.limits, {n: app.jobs[n].concurrency for n in self._names})
        if app.webhook_policy is not None:  # a POST on the wire must fit in the drain (workhorse.webhooks)
            from workhorse.webhooks.policy import check_drain

            check_drain(app.webhook_policy, self.drain_timeout, self.queues)

    def defer_rescue(self, leading: Callable[[], bool]) -> None:
        """Skip this worker's own rescue turns while ``leading()`` answers True: the scheduler role
        of the same process leads, and the leader rescues (``workhorse worker`` wires this)."""
        self._rescue_deferred = leading

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
        with self._service.running():  # a second run() while one runs is refused (WORKER_RUNNING)
            try:
                await self._run(burst)
            finally:
                self._stopped.set()  # a run that failed to start: stop() returns instead of waiting
        if self._failure is not None:
            raise self._failure
        return self.stats

    async def _run(self, burst: bool) -> None:
        self._burst = burst
        self._body_loop = asyncio.get_running_loop()
        if not self.app.is_memory:
            try:
                await self.app.driver.check_schema()
            except DatabaseError as error:
                if error.code != "DATABASE_UNAVAILABLE":
                    raise
                # A pooled session that died (a restart, a terminated session): the pool was swept
                # of the dead ones, so once more; a server that is down fails this one too.
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
            remove_stop_signals(self._body_loop, installed)
            await asyncio.to_thread(thread.join)
            pool.shutdown(wait=False, cancel_futures=True)

    async def stop(self, *, cut_off: bool = False) -> None:
        """Drain: stop claiming, let running jobs finish up to ``drain_timeout``, then return."""
        self._begin_drain(cut_off=cut_off)
        await self._stopped.wait()

    _failure: BaseException | None = None
    _parts: _Parts  # wired once the control loop runs

    def _install_signals(self) -> list[signal.Signals]:
        assert self._body_loop is not None
        return install_stop_signals(self._body_loop, self._on_signal)  # SIGTERM, SIGINT; main thread only

    def _on_signal(self, sig: signal.Signals) -> None:
        signals = self._service.signalled()
        log.warning(
            "worker %s: %s received, %s",
            self.id,
            sig.name,
            "draining" if signals == 1 else "cutting off the drain now",
        )
        self._begin_drain(cut_off=signals > 1)

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
        parts = self._wire(control)
        # The wake-ups of a driver that has them (Postgres: a LISTEN session; memory: its
        # subscriptions); a driver without them is polled every poll_interval.
        wakeups = (
            claim.open_wakeups(self.queues, control.wake, control.beat) if isinstance(claim, WakeupSource) else None
        )
        await parts.heartbeat.register()
        ready.set()
        log.info(
            "worker %s: claiming from %s",
            self.id,
            ", ".join(f"{q}({n})" for q, n in self.concurrency.items()),
        )
        # Ready jobs on our queues under names we do not know would wait in silence: say so.
        watch = UnknownNames(
            worker_id=self.id, queues=self.queues, names=self._names, source=settle, idle=self._table.idle
        )
        tasks = [
            asyncio.create_task(self._kept(parts.settler.run, "settle"), name="settle"),
            asyncio.create_task(self._kept(parts.heartbeat.run, "heartbeat"), name="heartbeat"),
            asyncio.create_task(self._kept(parts.progress.run, "progress"), name="progress"),
            asyncio.create_task(self._kept(watch.run, "unknown-names"), name="unknown-names"),
        ]
        if isinstance(settle, RescueRole):  # lapsed leases no claim may take (workhorse.rescue)
            rescuer = functools.partial(
                rescue_every,
                settle.rescue_lapsed,
                every=rescue_interval(self.visibility),
                by=f"worker {self.id}",
                announce=parts.settler.announce_buried,
                skip=self._rescue_deferred,
            )
            tasks.append(asyncio.create_task(self._kept(rescuer, "rescue"), name="rescue"))
        try:
            await parts.claimer.run(wakeups)
            if self._burst and self._failure is None:
                await watch.check()  # a burst that found nothing due: were jobs left for want of a name?
            self._begin_drain(cut_off=False)  # a burst found nothing due, or failed: drain what is held
            await self._drain(control, parts)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if wakeups is not None:
                await wakeups.close()
            with contextlib.suppress(WorkhorseError, TimeoutError):  # its row expires anyway: never wait long
                await asyncio.wait_for(control.heartbeat.deregister_worker(self.id), SETTLE_GRACE)
            for driver in {id(d): d for d in (claim, settle, heartbeat)}.values():
                if not self.app.is_memory:
                    await driver.close()

    def _wire(self, control: Control) -> _Parts:
        """Build the worker's parts for this run; each gets the narrow callbacks it needs."""
        assert self._body_loop is not None
        assert self._pool is not None
        table = self._table
        bridge = Bridge(
            worker_id=self.id,
            visibility=self.visibility,
            beat=self.heartbeat_interval,
            body_loop=self._body_loop,
            pool=self._pool,
            finished=lambda held, verdict: self._body_finished(control, held, verdict),
            thread_exited=lambda held: self._thread_exited(control, held),
            delivered=lambda: self._fill(control) if self._accepting else None,
        )
        bridge.attach(control.loop)
        info = WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(self.queues),
            concurrency=dict(self.concurrency),
        )
        heartbeat = Heartbeat(
            info,
            visibility=self.visibility,
            interval=self.heartbeat_interval,
            control=control,
            table=table,
            cancel=bridge.cancel,
            body_loop=self._body_loop,
            flow=self.flow,
        )
        settler = Settler(
            worker_id=self.id,
            visibility=self.visibility,
            control=control,
            table=table,
            stats=self.stats,
            jobs=self.app.jobs,
            forget=lambda held: self._forget(control, held),
            on_body_loop=bridge.on_body_loop,
            release=self.flow is not None,
            emit=self._emit_settled,
            hooks=self.app.hooks,
        )
        claimer = Claimer(
            worker_id=self.id,
            names=self._names,
            visibility=self.visibility,
            poll_interval=self.poll_interval,
            beat=self.heartbeat_interval,
            burst=self._burst,
            control=control,
            table=table,
            stats=self.stats,
            flow=self.flow,
            accepting=lambda: self._accepting,
            stalled=heartbeat.stalled,
            take=lambda claimed, asked_at: self._take(control, claimed, asked_at),
            buried=settler.announce_buried,
            refused=settler.announce_refused,
            fail=self._fail,
        )
        progress = Progress(worker_id=self.id, control=control, to_control=bridge.to_control)
        parts = _Parts(bridge, heartbeat, settler, claimer, progress)
        self._parts = parts
        return parts

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

    def _fail(self, error: BaseException) -> None:
        self._failure = error

    # -- one run's path: take (hold) -> fill (start) -> finished -> settle -> forget ------------

    def _take(self, control: Control, claimed: list[Claimed], asked_at: float) -> None:
        """Take an admitted batch into the table: its runs start as far as slots allow, the rest
        wait in the buffer (holding their leases, taken when the claim was sent) until a slot frees."""
        was_idle = self._table.hold([self._hold(c, asked_at) for c in claimed])
        self.stats.claimed += len(claimed)
        if self.app.hooks:
            for c in claimed:
                self.app.hooks.job("claimed", self.id, c)
        if was_idle:  # the heartbeat slept on the idle schedule; leases held already set an earlier beat
            control.leased.set()
        self._fill(control)

    def _fill(self, control: Control) -> None:
        """Start buffered runs into free slots, handed to the body loop in ONE wake-up."""
        starting = self._table.startable()
        now = time.monotonic()
        for held in starting:
            held.run.started = now
        if self.app.hooks:
            for held in starting:
                self.app.hooks.job("started", self.id, held.run.claimed)
        self._parts.bridge.start(starting)

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
            logger=JobLogger(handle.logger, {"job_id": claimed.id, "job": claimed.name, "attempt": claimed.attempt}),
            dependencies=dependencies_of(claimed.dependencies),
        )
        app = self.app
        held = Held(
            run=Run(claimed=claimed, handle=handle, ctx=ctx, started=time.monotonic()),
            lease=Lease(claimed.id, claimed.claims),
            slot_queue=claimed.queue,
            worker_id=self.id,
            renewed_at=asked_at,
            body_driver=lambda: app.driver,  # the body loop's driver, resolved when a step runs there
            on_progress=self._parts.progress.requested,
            drain_begun=lambda: not self._accepting,
            thread_alive=not handle.is_async,
        )
        ctx._hooks = held
        return held

    def _body_finished(self, control: Control, held: Held, verdict: Verdict) -> None:
        held.body_done = True
        if held.run.task is not None:  # the body ran (a run cancelled before its turn never started)
            held.run.ended = time.monotonic()
            self._table.ran(held.run.ended - held.run.started)
        self._release(control, held)
        if verdict.suspended or verdict.outcome is None:
            control.recheck = True  # its row may be due again, or due later: the next claim sweeps
        if verdict.suspended:
            self.stats.suspended += 1
            self._forget(control, held)
            return
        if verdict.outcome is None:
            if held.run.reasons and held.run.reasons[0] != "cancelled":
                self.stats.lease_lost += 1
                self.app.hooks.job("lease-lost", self.id, held.run.claimed)
            self._forget(control, held)
            return
        control.settles.put_nowait((held, verdict))

    def _thread_exited(self, control: Control, held: Held) -> None:
        held.thread_alive = False
        self._release(control, held)

    def _forget(self, control: Control, held: Held) -> None:
        self._table.forget(held)
        control.wake.set()

    def _release(self, control: Control, held: Held) -> None:
        self._table.release(held)
        control.wake.set()

    # -- the drain ----------------------------------------------------------------------------

    async def _drain(self, control: Control, parts: _Parts) -> None:
        waiting = self._table.take_buffered()  # claimed ahead and never started: straight back, unspent
        if waiting:
            await parts.claimer.hand_back([held.run.claimed for held in waiting])
            for held in waiting:
                self._forget(control, held)
        cut: float | None = None  # time.monotonic() of the cut-off
        while True:
            pending = self._table.leased()
            with self._lock:
                deadline = self._drain_deadline
            if not pending:
                break
            if cut is None and deadline is not None and time.monotonic() >= deadline:
                cut = time.monotonic()
                running = sum(1 for h in pending if not h.body_done)  # the others wait for their settle
                if running:
                    log.warning("worker %s: drain cut-off: handing %d running job(s) back unspent", self.id, running)
                for h in pending:
                    parts.bridge.cancel(h, "drain")
            elif cut is not None and time.monotonic() >= cut + SETTLE_GRACE:
                # Their settles cannot land (a lock held on their rows, a database that does not
                # answer): the drain ends anyway. Each lease lapses and the next claim takes the run.
                log.error(
                    "worker %s: %d job(s) still not settled %gs after the drain's cut-off; stopping without "
                    "them (their leases lapse and the next claim takes them): %s",
                    self.id, len(pending), SETTLE_GRACE, ", ".join(h.lease.job_id for h in pending[:10]),
                )  # fmt: skip
                break
            remaining = float("inf") if deadline is None else max(deadline - time.monotonic(), 0.05)
            await parts.claimer.sleep(min(remaining, 0.25) if cut is None else 0.1)
            control.wake.clear()
        log.info("worker %s: drained (%s)", self.id, self.stats.as_dict())
        if self.app.hooks:
            self.app.hooks.emit(LifecycleEvent(kind="drained", worker_id=self.id))

    def _emit_settled(self, held: Held, verdict: Verdict) -> None:
        """A landed settle, as a lifecycle event (``workhorse.hooks``)."""
        kind = OUTCOME_KINDS.get(str(verdict.outcome))
        if kind is not None and self.app.hooks:
            run = held.run
            took = (run.ended or time.monotonic()) - run.started
            delay = verdict.delay if verdict.outcome == "retry" else None
            self.app.hooks.job(kind, self.id, run.claimed, duration=took, error=verdict.error, delay=delay)


@dataclass(frozen=True)
class _Parts:
    """The parts of one running worker, wired by ``Worker._wire``."""

    bridge: Bridge
    heartbeat: Heartbeat
    settler: Settler
    claimer: Claimer
    progress: Progress
