"""Flow control through real workers, on the memory double and PostgreSQL alike (the contract's
"the memory driver enforces the same semantics"): each body records how many bodies run at once
per scope, and every cap is checked against that, with a run where the cap would have been
exceeded had it not held (bodies sleep long enough to overlap; the uncapped sanity run does)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from workhorse import App, Concurrency, ConfigurationError, JobContext, Limits, Outcome, Rate, Retry
from workhorse.types import Lease
from workhorse.worker import Worker

BODY = 0.05  # seconds each body sleeps: long enough for a worker of 10 slots to overlap them


class Overlap:
    """Bodies running at once, per scope, and the most seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.max: Counter[str] = Counter()

    @contextlib.contextmanager
    def running(self, *scopes: str) -> Iterator[None]:
        scopes = ("all", *scopes)
        with self._lock:
            for s in scopes:
                self.now[s] += 1
                self.max[s] = max(self.max[s], self.now[s])
        try:
            yield
        finally:
            with self._lock:
                for s in scopes:
                    self.now[s] -= 1


async def wait_for_states(app: App, ids: Iterable[str], states: set[str], timeout: float = 30.0) -> None:
    ids = list(ids)
    deadline = time.monotonic() + timeout
    while True:
        jobs = [await app.get_job(i) for i in ids]
        if all(j is not None and j.state in states for j in jobs):
            return
        assert time.monotonic() < deadline, [(j.id, j.state) for j in jobs if j is not None]
        await asyncio.sleep(0.05)


async def run_until(app: App, ids: Iterable[str], worker: Worker, timeout: float = 30.0) -> None:
    """Run a worker (not burst) until every job named is done, then stop it."""
    task = asyncio.create_task(worker.run())
    try:
        await wait_for_states(app, ids, {"done", "failed", "dead"}, timeout)
    finally:
        await worker.stop()
        await task


async def assert_done_unspent(app: App, ids: Iterable[str]) -> None:
    """Every job done on its first attempt: waiting over a cap spent nothing and wrote no error."""
    for i in ids:
        job = await app.get_job(i)
        assert job is not None
        assert (job.state, job.attempt, job.last_error, job.errors) == ("done", 1, None, [])


# -- per job name ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [None, 2])
async def test_concurrency_caps_running_runs_of_a_job(app: App, cap: int | None) -> None:
    seen = Overlap()

    @app.job(name="capped", tenant="none", concurrency=cap)
    async def capped(ctx: JobContext, payload: int) -> None:
        with seen.running():
            await asyncio.sleep(BODY)

    refs = await capped.enqueue_many(list(range(10)))
    stats = await app.worker(concurrency=10).run(burst=True)
    assert stats.completed == 10
    if cap is None:
        assert seen.max["all"] > 2  # the sanity run: without the cap these bodies overlap
    else:
        assert seen.max["all"] == cap
    await assert_done_unspent(app, [r.id for r in refs])


async def test_keyed_concurrency_waits_per_key(app: App) -> None:
    seen = Overlap()

    @app.job(name="sync", tenant="none", concurrency=Concurrency(1, key=lambda p: p["acct"], when_busy="wait"))
    async def sync(ctx: JobContext, payload: dict[str, Any]) -> None:
        with seen.running(f"acct:{payload['acct']}"):
            await asyncio.sleep(BODY)

    refs = await sync.enqueue_many([{"acct": a, "n": n} for n in range(4) for a in ("a", "b", "c")])
    await app.worker(concurrency=10).run(burst=True)
    assert [seen.max[f"acct:{a}"] for a in "abc"] == [1, 1, 1]
    assert seen.max["all"] > 1  # different keys ran side by side
    await assert_done_unspent(app, [r.id for r in refs])


async def test_keyed_concurrency_fail_refuses_a_busy_key(app: App) -> None:
    hold = asyncio.Event()
    started: list[str] = []
    outcomes: list[Outcome] = []

    @app.job(
        name="charge",
        tenant="none",
        concurrency=Concurrency(1, key=lambda p: p["acct"], when_busy="fail"),
        on_settled=outcomes.append,
    )
    async def charge(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.append(payload["id"])
        if payload["id"] == "k1":
            await hold.wait()

    worker = app.worker(concurrency=10)
    task = asyncio.create_task(worker.run())
    try:
        first = await charge.enqueue({"acct": "K", "id": "k1"})
        deadline = time.monotonic() + 15
        while "k1" not in started:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        second = await charge.enqueue({"acct": "K", "id": "k2"})
        other = await charge.enqueue({"acct": "L", "id": "l1"})
        await wait_for_states(app, [second.id], {"failed"}, 15)
        await wait_for_states(app, [other.id], {"done"}, 15)
        refused = await app.get_job(second.id)
        assert refused is not None and refused.last_error is not None
        assert refused.last_error["code"] == "JOB_KEY_BUSY"
        assert "k2" not in started and "l1" in started
        holder = await app.get_job(first.id)
        assert holder is not None and holder.state == "running"
        hold.set()
        await wait_for_states(app, [first.id], {"done"}, 15)
        deadline = time.monotonic() + 10
        while len(outcomes) < 3:
            assert time.monotonic() < deadline, outcomes
            await asyncio.sleep(0.02)
    finally:
        hold.set()
        await worker.stop()
        await task
    kinds = {o.job_id: o.kind for o in outcomes}
    assert kinds == {second.id: "refused", other.id: "completed", first.id: "completed"}
    assert worker.stats.refused == 1
    assert "k2" not in started


# -- app-wide limits -------------------------------------------------------------------------------


async def test_per_tenant_caps_each_tenant(app: App) -> None:
    app.limits = Limits(per_tenant=2)
    seen = Overlap()

    @app.job(name="report", tenant=lambda p: p["t"])
    async def report(ctx: JobContext, payload: dict[str, Any]) -> None:
        with seen.running(f"t:{payload['t']}"):
            await asyncio.sleep(BODY)

    refs = await report.enqueue_many([{"t": t, "n": n} for n in range(5) for t in ("a", "b", "c")])
    await app.worker(concurrency=10).run(burst=True)
    assert [seen.max[f"t:{t}"] for t in "abc"] == [2, 2, 2]
    assert seen.max["all"] > 2  # tenants ran side by side
    await assert_done_unspent(app, [r.id for r in refs])


async def test_a_tenants_backlog_does_not_starve_another(app: App) -> None:
    app.limits = Limits(per_tenant=2)
    seen = Overlap()
    finished: list[str] = []

    @app.job(name="bulk", tenant=lambda p: p["t"])
    async def bulk(ctx: JobContext, payload: dict[str, Any]) -> None:
        with seen.running(f"t:{payload['t']}"):
            await asyncio.sleep(0.01)
        finished.append(payload["t"])

    a = await bulk.enqueue_many([{"t": "A", "n": n} for n in range(300)])
    b = await bulk.enqueue_many([{"t": "B", "n": n} for n in range(10)])
    await app.worker(concurrency=10).run(burst=True)
    assert Counter(finished) == {"A": 300, "B": 10}
    last_b = max(i for i, t in enumerate(finished) if t == "B")
    a_before_last_b = finished[:last_b].count("A")
    assert a_before_last_b < 60, a_before_last_b  # B finished while A had done a small part
    assert seen.max["t:A"] == 2 and seen.max["t:B"] == 2
    await assert_done_unspent(app, [r.id for r in (*a[:5], *b)])


async def test_per_queue_caps_the_named_queue_only(app: App) -> None:
    app.limits = Limits(per_queue={"q": 1})
    seen = Overlap()

    @app.job(name="in_q", tenant="none", queue="q")
    async def in_q(ctx: JobContext, payload: int) -> None:
        with seen.running("q"):
            await asyncio.sleep(BODY)

    @app.job(name="in_other", tenant="none", queue="other")
    async def in_other(ctx: JobContext, payload: int) -> None:
        with seen.running("other"):
            await asyncio.sleep(BODY)

    refs = [*await in_q.enqueue_many(list(range(5))), *await in_other.enqueue_many(list(range(5)))]
    await app.worker(queues=["q", "other"], concurrency=10).run(burst=True)
    assert seen.max["q"] == 1
    assert seen.max["other"] > 1
    await assert_done_unspent(app, [r.id for r in refs])


async def test_per_queue_int_caps_every_queue(app: App) -> None:
    app.limits = Limits(per_queue=2)
    seen = Overlap()

    @app.job(name="one", tenant="none", queue="one")
    async def one(ctx: JobContext, payload: int) -> None:
        with seen.running("one"):
            await asyncio.sleep(BODY)

    @app.job(name="two", tenant="none", queue="two")
    async def two(ctx: JobContext, payload: int) -> None:
        with seen.running("two"):
            await asyncio.sleep(BODY)

    refs = [*await one.enqueue_many(list(range(6))), *await two.enqueue_many(list(range(6)))]
    await app.worker(queues=["one", "two"], concurrency=10).run(burst=True)
    assert (seen.max["one"], seen.max["two"]) == (2, 2)
    assert seen.max["all"] > 2
    await assert_done_unspent(app, [r.id for r in refs])


async def test_total_caps_every_running_run(app: App) -> None:
    app.limits = Limits(total=3)
    seen = Overlap()

    @app.job(name="left", tenant=lambda p: p["t"])
    async def left(ctx: JobContext, payload: dict[str, Any]) -> None:
        with seen.running():
            await asyncio.sleep(BODY)

    @app.job(name="right", tenant="none", queue="side")
    async def right(ctx: JobContext, payload: dict[str, Any]) -> None:
        with seen.running():
            await asyncio.sleep(BODY)

    refs = [
        *await left.enqueue_many([{"t": f"t{n % 3}"} for n in range(8)]),
        *await right.enqueue_many([{"t": None} for _ in range(8)]),
    ]
    await app.worker(queues=["default", "side"], concurrency=10).run(burst=True)
    assert seen.max["all"] == 3
    await assert_done_unspent(app, [r.id for r in refs])


async def test_rate_per_tenant_is_a_sliding_window(app: App) -> None:
    app.limits = Limits(rate_per_tenant=Rate(3, per="1s"))
    starts: list[float] = []

    @app.job(name="call_api", tenant=lambda p: p["t"])
    async def call_api(ctx: JobContext, payload: dict[str, Any]) -> None:
        starts.append(time.monotonic())
        await asyncio.sleep(0.01)

    refs = await call_api.enqueue_many([{"t": "A", "n": n} for n in range(7)])
    # A burst run may end while everything left is rate-held: run until every job is done.
    await run_until(app, [r.id for r in refs], app.worker(concurrency=10), timeout=30)
    starts.sort()
    assert len(starts) == 7
    for i in range(len(starts) - 3):
        # starts i..i+3 are four starts: they must not fit in one window of 1s
        assert starts[i + 3] - starts[i] >= 1.0 - 0.05, [round(s - starts[0], 3) for s in starts]
    await assert_done_unspent(app, [r.id for r in refs])


# -- zero, and lapsed slots ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("concurrency", "limits"),
    [
        (0, None),
        (Concurrency(0, key=lambda p: "k"), None),
        (None, Limits(total=0)),
        (None, Limits(per_tenant=0)),
        (None, Limits(per_queue={"default": 0})),
        (None, Limits(per_queue=0)),
        (None, Limits(rate_per_tenant=Rate(0, per="1s"))),
    ],
)
async def test_zero_is_a_hard_stop(app: App, concurrency: Any, limits: Limits | None) -> None:
    app.limits = limits
    ran: list[int] = []

    @app.job(name="stopped", tenant=lambda p: "t", concurrency=concurrency)
    async def stopped(ctx: JobContext, payload: int) -> None:
        ran.append(payload)

    ref = await stopped.enqueue(1)
    stats = await app.worker(concurrency=10).run(burst=True)
    assert stats.claimed == 0 and ran == []
    job = await app.get_job(ref.id)
    assert job is not None
    assert (job.state, job.attempt, job.last_error, job.errors) == ("ready", 0, None, [])


@pytest.mark.parametrize("then", ["reclaimed", "buried", "revoked"])
async def test_a_lapsed_slot_frees_and_its_holder_loses_it(app: App, then: str) -> None:
    attempts = 1 if then == "buried" else 5

    @app.job(name="slot", tenant="none", concurrency=1, retry=Retry(attempts=attempts, base=0))
    async def slot(ctx: JobContext, payload: int) -> None:
        return None

    @app.job(name="free", tenant="none")
    async def free(ctx: JobContext, payload: int) -> None:
        return None

    first = await slot.enqueue(1)
    second = await slot.enqueue(2)
    other = await free.enqueue(3)
    flow = app.worker().flow  # every declared job's caps, as a worker hands them to its claim
    assert flow is not None
    driver = app.driver

    async def claim(worker_id: str, names: list[str]) -> Any:
        return await driver.claim(worker_id=worker_id, wants={"default": 10}, names=names, visibility=1.0, flow=flow)

    one = await claim("w-1", ["slot"])
    assert [c.id for c in one.claimed] == [first.id] and one.held_back >= 1
    lease = Lease(first.id, one.claimed[0].claims)
    busy = await claim("w-2", ["slot"])
    assert busy.claimed == []  # the slot is held
    renewed = await driver.heartbeat("w-1", [lease], 1.0)
    assert renewed.held == {first.id}  # the heartbeat renews the slot with the lease
    await asyncio.sleep(1.3)  # the lease (and the slot) lapses: w-1 is frozen

    if then == "revoked":
        two = await claim("w-2", ["free"])  # not ours to re-take: locked and revoked
        assert [c.id for c in two.claimed] == [other.id]
        revoked = await app.get_job(first.id)
        assert revoked is not None and revoked.state == "running" and revoked.worker_id is None
        assert revoked.claims == lease.claims + 1
        three = await claim("w-3", ["slot"])  # the slot is free: the revoked run is taken again
        assert len(three.claimed) == 1
    elif then == "buried":
        two = await claim("w-2", ["slot"])  # the final attempt's lapse buries it; the next job runs
        assert [b.id for b in two.buried] == [first.id]
        assert [c.id for c in two.claimed] == [second.id]
    else:
        two = await claim("w-2", ["slot"])  # the lapsed run is re-taken by the claim that freed it
        assert [c.id for c in two.claimed] == [first.id] and two.claimed[0].claims > lease.claims
        job = await app.get_job(first.id)
        assert job is not None and job.worker_id == "w-2" and job.attempt == 2

    lost = await driver.heartbeat("w-1", [lease], 1.0)
    assert lost.held == set()  # the frozen holder's renewal misses: its slot is gone (JOB_SLOT_LOST)
    still = await app.get_job(second.id)
    assert still is not None
    if then != "buried":
        assert (still.state, still.attempt) == ("ready", 0)  # the cap of 1 still holds


@pytest.mark.parametrize(
    ("limits", "concurrency"),
    [
        (Limits(per_tenant=5), None),  # the lapsed job is tenant="none": per_tenant does not count it
        (None, 2),  # another job of the app is capped; the lapsed one is not
        (Limits(rate_per_tenant=Rate(100, per="1s")), None),  # a rate counts starts, never running runs
        (Limits(per_queue={"elsewhere": 1}), None),  # another queue's cap
    ],
)
async def test_a_flow_claim_retakes_a_lapsed_lease_no_cap_counts(
    app: App, limits: Limits | None, concurrency: int | None
) -> None:
    """Issue 26: the flow claim looked only at running rows some cap counts, so a lapsed job no cap
    counts was never re-taken by a worker under flow control (it stayed running for good). It is
    re-taken like any lapsed lease: attempt 2, the lapse counted, its old holder fenced out; and the
    claim before the lapse says when to look again."""
    app.limits = limits

    @app.job(name="loose", tenant="none", retry=Retry(attempts=3, base=0))
    async def loose(ctx: JobContext, payload: int) -> None:
        return None

    @app.job(name="capped", tenant=lambda p: "t", concurrency=concurrency)
    async def capped(ctx: JobContext, payload: int) -> None:
        return None

    ref = await loose.enqueue(1)
    flow = app.worker().flow  # every declared job's caps, as a worker hands them to its claim
    assert flow is not None and not flow.counts("loose", "default", None)
    driver = app.driver

    async def claim(worker_id: str, visibility: float) -> Any:
        return await driver.claim(
            worker_id=worker_id, wants={"default": 10}, names=["loose", "capped"], visibility=visibility, flow=flow
        )

    one = await claim("w-1", 0.5)
    assert [c.id for c in one.claimed] == [ref.id]
    lease = Lease(ref.id, one.claimed[0].claims)
    idle = await claim("w-2", 30.0)
    assert idle.claimed == [] and idle.next_due is not None and idle.next_due <= 0.5  # wake at the lapse
    await asyncio.sleep(0.8)  # w-1 died: its lease lapses
    lapsed = await app.get_job(ref.id)
    assert lapsed is not None and (lapsed.state, lapsed.lease_lapsed) == ("running", True)
    two = await claim("w-2", 30.0)
    assert [(c.id, c.attempt) for c in two.claimed] == [(ref.id, 2)]
    assert (await driver.heartbeat("w-1", [lease], 1.0)).held == set()  # the dead holder is fenced out
    job = await app.get_job(ref.id)
    assert job is not None and (job.worker_id, job.lease_lapsed) == ("w-2", False)
    if app.is_memory:
        return  # the lapse's counters are an operator read, PostgreSQL's alone
    stats = await app.admin.stats()
    assert [(r.name, r.lapsed, r.lease_lapsed, r.running) for r in stats.names if r.name == "loose"] == [
        ("loose", 1, 0, 1)
    ]


# -- caps past PostgreSQL's int ----------------------------------------------------------------------

BIG = 2**31  # a whole number >= 0, as the contract asks; one past FLOW_CLAIM's ::int parameters


def _big_declarations() -> list[tuple[Any, Limits | None]]:
    return [
        (None, Limits(total=BIG)),
        (BIG, None),
        (None, Limits(per_tenant=BIG, rate_per_tenant=Rate(BIG, per="1s"))),
    ]


def _declare_big(app: App, index: int) -> Any:
    """The job under one big declaration, or the ConfigurationError its construction raised."""
    try:
        concurrency, limits = _big_declarations()[index]
        app.limits = limits

        @app.job(name="big", tenant=lambda p: "t", concurrency=concurrency)
        async def big(ctx: JobContext, payload: int) -> None:
            return None
    except ConfigurationError as error:
        return error
    return big


async def _a_big_cap_is_refused_or_enforced(app: App, index: int) -> None:
    """Either construction refuses the number (CONFIG_INVALID), or a claim under it works: a cap
    the declaration accepted must never make every claim fail."""
    big = _declare_big(app, index)
    if isinstance(big, ConfigurationError):
        assert big.code == "CONFIG_INVALID"
        return
    ref = await big.enqueue(1)
    flow = app.worker().flow
    result = await app.driver.claim(worker_id="w-1", wants={"default": 1}, names=["big"], visibility=30, flow=flow)
    assert [c.id for c in result.claimed] == [ref.id]


@pytest.mark.parametrize("index", range(3))
async def test_a_big_cap_is_enforced(app: App, index: int) -> None:
    """Caps are bigint in the claim: a number past 2**31 does not break a PostgreSQL claim."""
    await _a_big_cap_is_refused_or_enforced(app, index)


async def test_a_zero_cap_stops_only_what_it_counts_and_refuses_nothing(app: App) -> None:
    """A cap of 0 is a hard stop even with when_busy='fail' (no run is refused: the jobs stay
    ready, unspent), and jobs it does not count still start, even behind many it holds back."""
    app.limits = Limits(per_tenant=0)

    @app.job(name="tenanted", tenant=lambda p: p["org"])
    async def tenanted(ctx: JobContext, payload: dict[str, str]) -> None:
        return None

    @app.job(name="keyed", tenant="none", concurrency=Concurrency(0, key=lambda p: p["k"], when_busy="fail"))
    async def keyed(ctx: JobContext, payload: dict[str, str]) -> None:
        return None

    @app.job(name="free", tenant="none")
    async def free(ctx: JobContext, payload: None) -> None:
        return None

    held = await tenanted.enqueue_many([{"org": "a"}] * 30) + await keyed.enqueue_many([{"k": "x"}] * 30)
    runs = await free.enqueue_many([None] * 3)
    await app.worker(concurrency=5).run(burst=True)
    for ref in runs:
        job = await app.get_job(ref.id)
        assert job is not None and job.state == "done"
    for ref in held:
        job = await app.get_job(ref.id)
        assert job is not None and (job.state, job.attempt, job.last_error) == ("ready", 0, None)


async def test_a_job_over_a_cap_waits_for_the_slot_without_a_busy_loop(app: App, monkeypatch: Any) -> None:
    """Handed back uncounted, the job is claimed again when the slot frees, not polled for meanwhile."""
    hold = asyncio.Event()
    claims: list[int] = []

    @app.job(name="one_at_a_time", tenant="none", concurrency=1)
    async def one_at_a_time(ctx: JobContext, payload: int) -> None:
        if payload == 1:
            await hold.wait()

    real = type(app.driver).claim

    async def counting(self: Any, **kwargs: Any) -> Any:
        answer = await real(self, **kwargs)
        claims.append(len(answer.claimed))
        return answer

    monkeypatch.setattr(type(app.driver), "claim", counting)
    first = await one_at_a_time.enqueue(1)
    second = await one_at_a_time.enqueue(2)
    worker = app.worker(concurrency=4)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for_states(app, [first.id], {"running"}, 15)
        before = len(claims)
        await asyncio.sleep(1.0)
        during = len(claims) - before
        waiting = await app.get_job(second.id)
        assert waiting is not None and (waiting.state, waiting.attempt) == ("ready", 0)
        hold.set()
        await wait_for_states(app, [first.id, second.id], {"done"}, 15)
    finally:
        hold.set()
        await worker.stop()
        await task
    assert during <= 3, claims  # the worker rests while the slot is held
    await assert_done_unspent(app, [first.id, second.id])


@pytest.mark.parametrize("per_tenant", [None, 1])
async def test_a_busy_refusing_key_is_refused_only_when_no_other_cap_holds_it(app: App, per_tenant: int | None) -> None:
    """when_busy='fail' refuses a run its busy key keeps; a run another full cap keeps (here its
    tenant's) waits ready and unspent like any other, refused by nothing."""
    app.limits = Limits(per_tenant=per_tenant)

    @app.job(name="charge", tenant=lambda p: "t", concurrency=Concurrency(1, key=lambda p: "k", when_busy="fail"))
    async def charge(ctx: JobContext, payload: int) -> None:
        return None

    first = await charge.enqueue(1)
    flow = app.worker().flow

    async def claim(worker_id: str) -> Any:
        return await app.driver.claim(
            worker_id=worker_id, wants={"default": 5}, names=["charge"], visibility=30, flow=flow
        )

    assert [c.id for c in (await claim("w-1")).claimed] == [first.id]
    second = await charge.enqueue(2)
    two = await claim("w-2")
    job = await app.get_job(second.id)
    assert two.claimed == [] and job is not None
    if per_tenant is None:
        assert [r.id for r in two.refused] == [second.id] and job.state == "failed"
        assert job.last_error is not None and job.last_error["code"] == "JOB_KEY_BUSY"
    else:
        assert two.refused == [] and (job.state, job.attempt, job.last_error) == ("ready", 0, None)
