"""The scheduler's cadence in virtual time: a fake store of rounds, an injected clock and sleep.

Counting rounds over simulated minutes proves the statement budget exactly (each round is ONE
statement in PostgreSQL), without waiting real minutes; the process test in
test_scheduler_processes.py confirms a real `workhorse scheduler` keeps that cadence.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from workhorse import App, JobContext
from workhorse.leader.rounds import RoundAnswer, RoundRequest, TaskState
from workhorse.leader.scheduler import Scheduler
from workhorse.types import Rescued

BUDGET_PER_MINUTE = 6
START = datetime(2026, 5, 17, 10, 0, 7, tzinfo=UTC)


@dataclass
class Lease:
    holder: str
    epoch: int
    expires: float


@dataclass
class FakeStore:
    """Rounds as the SQL does them, on a virtual clock: lease, epoch fence, watermark fence."""

    clock: VirtualTime
    lease: Lease | None = None
    tasks: dict[str, TaskState] = field(default_factory=dict)
    rounds: list[tuple[float, str]] = field(default_factory=list)
    fired: list[tuple[str, datetime, datetime]] = field(default_factory=list)  # task, occurrence, when
    released: list[str] = field(default_factory=list)
    crashed: set[str] = field(default_factory=set)
    rollups: int = 0
    rescues: list[tuple[float, int]] = field(default_factory=list)  # (when, batch asked)

    def now(self) -> datetime:
        return START + timedelta(seconds=self.clock.now)

    async def check_schema(self) -> None:
        return None

    async def rollup(self) -> int:
        self.rollups += 1
        return 0

    async def rescue(self, batch: int) -> Rescued:
        self.rescues.append((self.clock.now, batch))
        return Rescued([], [])

    async def round(self, request: RoundRequest) -> RoundAnswer:
        t = self.clock.now
        self.rounds.append((t, request.holder))
        before = self.lease
        mine = False
        if self.lease is None or self.lease.holder == request.holder or self.lease.expires <= t:
            same = self.lease is not None and self.lease.holder == request.holder and self.lease.expires > t
            epoch = 1 if self.lease is None else (self.lease.epoch if same else self.lease.epoch + 1)
            self.lease = Lease(request.holder, epoch, t + request.ttl)
            mine = True
        fired = set()
        if mine and self.lease.epoch == request.epoch:
            for planned in request.fires:
                row = self.tasks.get(planned.task)
                occurrence = planned.fire.occurrence
                if row and row.watermark == planned.prev and row.watermark < occurrence <= self.now():
                    self.tasks[planned.task] = TaskState(planned.task, occurrence, row.descriptor)
                    self.fired.append((planned.task, occurrence, self.now()))
                    fired.add(planned.task)
        if mine:
            for d in request.declared:
                if d.name not in self.tasks:
                    self.tasks[d.name] = TaskState(d.name, self.now(), (d.schedule, d.timezone, d.catch_up))
        return RoundAnswer(
            db_now=self.now(),
            epoch=self.lease.epoch if mine else None,
            expires_at=START + timedelta(seconds=self.lease.expires) if mine else None,
            holder=None if before is None else before.holder,
            holder_epoch=None if before is None else before.epoch,
            holder_expires_at=None if before is None else START + timedelta(seconds=before.expires),
            tasks={n: s for n, s in self.tasks.items() if n in request.names} if mine else {},
            fired=frozenset(fired),
            inserted=frozenset(p.job.id for p in request.fires if p.task in fired),
        )

    async def release(self, holder: str, epoch: int) -> bool:
        if holder in self.crashed:
            return False
        if self.lease is not None and self.lease.holder == holder and self.lease.epoch == epoch:
            self.lease.expires = self.clock.now
            self.released.append(holder)
            return True
        return False

    async def close(self) -> None:
        return None


class VirtualTime:
    """A clock that jumps to the next sleeper's deadline once every task has settled."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), future))
        await future

    async def settle(self) -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self) -> None:
        """Let everything runnable run, then wake the earliest sleeper at its deadline."""
        await self.settle()
        while self._sleepers:
            deadline, _, future = heapq.heappop(self._sleepers)
            if future.done():
                continue
            self.now = max(self.now, deadline)
            future.set_result(None)
            break
        await self.settle()

    async def run_until(self, seconds: float) -> None:
        while self.now < seconds:
            await self.advance()


def virtual(app: App, store: FakeStore, time: VirtualTime, **options: Any) -> Scheduler:
    return Scheduler(app, store=store, clock=time.clock, waiter=time.sleep, handle_signals=False, **options)


async def stop_all(time: VirtualTime, schedulers: list[Scheduler], runs: list[asyncio.Task[Any]]) -> None:
    stopping = [asyncio.create_task(s.stop()) for s in schedulers]
    while not all(r.done() for r in runs):
        await time.advance()  # a stop takes effect once the sleep in flight ends
    await asyncio.gather(*stopping, *runs)


def yearly_app() -> App:
    app = App("postgresql://unused@127.0.0.1:1/none")

    @app.task(name="new-year", cron="@yearly", tenant="none")
    async def new_year(ctx: JobContext, payload: Any) -> None: ...

    return app


async def test_an_idle_leader_issues_four_statements_a_minute() -> None:
    time = VirtualTime()
    store = FakeStore(time)
    leader = virtual(yearly_app(), store, time)
    run = asyncio.create_task(leader.run())
    await time.run_until(600)
    await stop_all(time, [leader], [run])
    steady = [t for t, _ in store.rounds if 1 <= t <= 600]  # after the election and the registration round
    per_minute = len(steady) * 60 / (600 - 1)
    assert 3.5 <= per_minute <= 4.1, per_minute
    assert per_minute <= BUDGET_PER_MINUTE
    gaps = [b - a for a, b in itertools.pairwise(steady)]
    assert min(gaps) >= 15 - 0.01, gaps  # one round per interval, never faster
    assert leader.stats.elections == 1 and leader.stats.lost == 0
    assert store.released == [leader.id], "stop() released the lease"


async def test_an_idle_leader_rescues_every_fourth_round_and_a_standby_never() -> None:
    """The rescue duty (workhorse.leader.rescue) costs the leader one statement every fourth round when
    nothing lapsed: once a minute at the default interval, so rounds and rescues stay within the
    budget; a standby rescues nothing (its workers do)."""
    time = VirtualTime()
    store = FakeStore(time)
    app = yearly_app()
    leader, standby = virtual(app, store, time), virtual(app, store, time)
    leader_run = asyncio.create_task(leader.run())
    await time.settle()
    standby_run = asyncio.create_task(standby.run())
    await time.run_until(600)
    await stop_all(time, [leader, standby], [leader_run, standby_run])
    steady = [t for t, _ in store.rescues if 1 <= t <= 600]
    assert 0.9 <= len(steady) * 60 / 599 <= 1.1, steady
    gaps = [b - a for a, b in itertools.pairwise(steady)]
    assert max(gaps) <= 4 * leader.interval + 0.01, gaps  # once a minute
    rounds = [t for t, h in store.rounds if h == leader.id and 1 <= t <= 600]
    assert (len(rounds) + len(steady)) * 60 / 600 <= 5  # 40 rounds and 10 rescues
    leading = {t for t, h in store.rounds if h == leader.id}
    assert {t for t, _ in store.rescues} <= leading, "only after a round the leader led"


async def test_a_standby_stays_in_budget_and_takes_over_within_one_lease() -> None:
    time = VirtualTime()
    store = FakeStore(time)
    app = yearly_app()
    leader, standby = virtual(app, store, time), virtual(app, store, time)
    leader_run = asyncio.create_task(leader.run())
    await time.settle()
    standby_run = asyncio.create_task(standby.run())
    await time.run_until(300)
    standby_rounds = [t for t, h in store.rounds if h == standby.id]
    assert len(standby_rounds) * 60 / 300 <= BUDGET_PER_MINUTE, standby_rounds
    assert leader.leading and not standby.leading

    # The leader dies without a word (it never releases): the standby takes over when the lease ends.
    crashed_at = time.now
    last_renewal = max(t for t, h in store.rounds if h == leader.id)
    store.crashed.add(leader.id)
    leader_run.cancel()
    while not standby.leading:
        await time.advance()
    assert time.now - last_renewal <= leader.lease + 0.1
    assert time.now - crashed_at <= leader.lease + 0.1
    await stop_all(time, [standby], [standby_run])
    assert standby.stats.elections == 1


async def test_a_released_lease_is_taken_at_the_next_round_not_at_expiry() -> None:
    time = VirtualTime()
    store = FakeStore(time)
    app = yearly_app()
    leader, standby = virtual(app, store, time), virtual(app, store, time)
    leader_run = asyncio.create_task(leader.run())
    await time.settle()
    standby_run = asyncio.create_task(standby.run())
    await time.run_until(100)
    released_at = time.now
    await stop_all(time, [leader], [leader_run])
    assert store.released == [leader.id]
    while not standby.leading:
        await time.advance()
    assert time.now - released_at <= standby.interval + 0.1, "well within the 30 s the lease had left"
    await stop_all(time, [standby], [standby_run])


async def test_rounds_follow_the_next_due_occurrence() -> None:
    time = VirtualTime()
    store = FakeStore(time)
    app = App("postgresql://unused@127.0.0.1:1/none")

    @app.task(name="tick", every="2s", tenant="none")
    async def tick(ctx: JobContext, payload: Any) -> None: ...

    leader = virtual(app, store, time)
    run = asyncio.create_task(leader.run())
    await time.run_until(60)
    await stop_all(time, [leader], [run])
    occurrences = [o for _, o, _ in store.fired]
    assert len(occurrences) >= 28
    assert occurrences == sorted(set(occurrences)), "each occurrence once"
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(occurrences))
    assert len(store.rounds) <= 2 * 31 + 4, "one round per occurrence, not a busy loop"
    lateness = [(when - o).total_seconds() for _, o, when in store.fired]
    assert all(0 <= late < 0.05 for late in lateness), lateness  # fired at its due time, never before


async def test_a_task_whose_job_cannot_be_built_is_reported_and_does_not_spin(caplog: Any) -> None:
    time = VirtualTime()
    store = FakeStore(time)
    app = App("postgresql://unused@127.0.0.1:1/none")
    tenants: dict[str, Any] = {"now": "acme"}

    @app.task(name="tick", every="1s", tenant=lambda p: tenants["now"])
    async def tick(ctx: JobContext, payload: Any) -> None: ...

    tenants["now"] = None  # the tenant function turns bad after declaration
    leader = virtual(app, store, time)
    run = asyncio.create_task(leader.run())
    await time.run_until(60)
    await stop_all(time, [leader], [run])
    assert store.fired == []
    assert len(store.rounds) <= 8, "an unfireable task is retried each round (15 s), not in a busy loop"
    assert "cannot be fired" in caplog.text and "tick" in caplog.text
