"""Pausing and resuming a queue (``app.admin.pause/resume/pauses``): a paused
queue gives nothing to any claim, other queues run, running jobs finish, resume lets them run."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext
from workhorse.types import QueuePause, Settlement


def declare(app: App, ran: list[str]):  # type: ignore[no-untyped-def]
    @app.job(name="alpha", queue="qa", tenant="none")
    async def alpha(ctx: JobContext, payload: int) -> int:
        ran.append(f"alpha {payload}")
        return payload

    @app.job(name="beta", queue="qb", tenant="none")
    async def beta(ctx: JobContext, payload: int) -> int:
        ran.append(f"beta {payload}")
        return payload

    return alpha, beta


async def states(app: App) -> dict[str, str]:
    return {j.id: j.state for j in (await app.admin.list(limit=200)).jobs}


async def test_a_paused_queue_is_not_claimed_until_resumed(app: App) -> None:
    ran: list[str] = []
    alpha, beta = declare(app, ran)
    a = [(await alpha.enqueue(i)).id for i in range(2)]
    b = [(await beta.enqueue(i)).id for i in range(2)]
    paused = await app.admin.pause("qa", reason="deploy")
    assert (paused.queue, paused.reason) == ("qa", "deploy")

    stats = await app.worker().run(burst=True)
    assert (stats.claimed, stats.completed) == (2, 2)
    assert sorted(ran) == ["beta 0", "beta 1"]
    found = await states(app)
    assert [found[i] for i in a] == ["ready", "ready"]
    assert [found[i] for i in b] == ["done", "done"]
    # A worker of the paused queue alone claims nothing either, and the driver's claim neither.
    assert (await app.worker(queues=["qa"]).run(burst=True)).claimed == 0
    direct = await app.driver.claim(worker_id="w", wants={"qa": 5}, names=["alpha"], visibility=30)
    assert (direct.claimed, direct.buried) == ([], [])
    # A job enqueued while paused waits too.
    late = (await alpha.enqueue(9)).id
    assert (await app.worker().run(burst=True)).claimed == 0
    assert (await states(app))[late] == "ready"

    assert await app.admin.resume("qa") is True
    assert await app.admin.pauses() == []
    stats = await app.worker().run(burst=True)
    assert (stats.claimed, stats.completed) == (3, 3)
    assert sorted(ran) == ["alpha 0", "alpha 1", "alpha 9", "beta 0", "beta 1"]
    assert set((await states(app)).values()) == {"done"}


async def test_a_paused_queue_keeps_its_delayed_jobs_waiting_when_they_come_due(app: App) -> None:
    ran: list[str] = []
    alpha, _ = declare(app, ran)
    ref = (await alpha.enqueue(1, delay="100ms")).id
    await app.admin.pause("qa")
    await asyncio.sleep(0.25)
    assert (await app.worker(queues=["qa"]).run(burst=True)).claimed == 0
    assert (await states(app))[ref] == "ready"  # due (reported ready), but not taken
    await app.admin.resume("qa")
    await app.worker(queues=["qa"]).run(burst=True)
    assert (await states(app))[ref] == "done" and ran == ["alpha 1"]


async def test_running_jobs_of_a_paused_queue_finish(app: App) -> None:
    ran: list[str] = []
    alpha, _ = declare(app, ran)
    first = (await alpha.enqueue(1)).id
    second = (await alpha.enqueue(2)).id
    held = await app.driver.claim(worker_id="w", wants={"qa": 1}, names=["alpha"], visibility=30)
    assert [c.id for c in held.claimed] == [first]
    await app.admin.pause("qa")
    claim = held.claimed[0]
    assert await app.driver.settle([Settlement(first, "w", claim.claims, "done", result="1")]) == [True]
    assert await states(app) == {first: "done", second: "ready"}


async def test_a_paused_queue_does_not_sweep_lapsed_leases(app: App) -> None:
    ran: list[str] = []
    alpha, _ = declare(app, ran)
    ref = (await alpha.enqueue(1)).id
    held = await app.driver.claim(worker_id="gone", wants={"qa": 1}, names=["alpha"], visibility=0.1)
    assert [c.id for c in held.claimed] == [ref]
    await app.admin.pause("qa")
    await asyncio.sleep(0.3)
    again = await app.driver.claim(worker_id="w2", wants={"qa": 1}, names=["alpha"], visibility=30)
    assert (again.claimed, again.buried) == ([], [])
    job = await app.admin.get(ref)
    assert job is not None and (job.state, job.worker_id) == ("running", "gone")
    await app.admin.resume("qa")
    taken = await app.driver.claim(worker_id="w2", wants={"qa": 1}, names=["alpha"], visibility=30)
    assert [(c.id, c.attempt) for c in taken.claimed] == [(ref, 2)]


async def test_pausing_twice_keeps_the_first_paused_at_and_the_reason_unless_given(app: App) -> None:
    first = await app.admin.pause("qa", reason="deploy")
    await asyncio.sleep(0.01)
    second = await app.admin.pause("qa")
    assert second == QueuePause("qa", first.paused_at, "deploy")
    await asyncio.sleep(0.01)
    third = await app.admin.pause("qa", reason="incident 42")
    assert third == QueuePause("qa", first.paused_at, "incident 42")
    assert await app.admin.pauses() == [third]
    assert first.paused_at.utcoffset() == timedelta(0)


async def test_pause_without_a_reason_then_with_one(app: App) -> None:
    first = await app.admin.pause("qa")
    assert (first.queue, first.reason) == ("qa", None)
    second = await app.admin.pause("qa", reason="now with a reason")
    assert (second.paused_at, second.reason) == (first.paused_at, "now with a reason")


async def test_resume_answers_whether_the_queue_was_paused(app: App) -> None:
    assert await app.admin.resume("qa") is False
    await app.admin.pause("qa")
    assert await app.admin.resume("qa") is True
    assert await app.admin.resume("qa") is False
    # Paused again after a resume: a fresh paused_at, no old reason.
    old = await app.admin.pause("qa", reason="one")
    await app.admin.resume("qa")
    await asyncio.sleep(0.01)
    new = await app.admin.pause("qa")
    assert new.reason is None and new.paused_at > old.paused_at


async def test_pauses_are_listed_by_queue(app: App) -> None:
    assert await app.admin.pauses() == []
    for queue in ("zeta", "alpha", "mid"):
        await app.admin.pause(queue, reason=f"r {queue}")
    listed = await app.admin.pauses()
    assert [(p.queue, p.reason) for p in listed] == [("alpha", "r alpha"), ("mid", "r mid"), ("zeta", "r zeta")]
    assert all(p.paused_at.utcoffset() == timedelta(0) for p in listed)
    assert listed[0].to_dict()["queue"] == "alpha"
    assert await app.admin.resume("mid") is True
    assert [p.queue for p in await app.admin.pauses()] == ["alpha", "zeta"]


async def test_pauses_are_listed_in_code_point_order_whatever_the_collation(app: App) -> None:
    names = ["b", "A", "a", "B", "_x", "x-1", "x1", "é"]
    for queue in names:
        await app.admin.pause(queue)
    assert [p.queue for p in await app.admin.pauses()] == sorted(names)  # A B _x a b x-1 x1 é
    assert [p.queue for p in (await app.admin.snapshot()).paused] == sorted(names)


@pytest.mark.parametrize("queue", ["", "   ", "x" * 201, None, 7])
async def test_pause_and_resume_refuse_a_bad_queue_name(app: App, queue: Any) -> None:
    with pytest.raises(ConfigurationError) as paused:
        await app.admin.pause(queue)
    assert paused.value.code == "QUEUE_NAME_INVALID"
    with pytest.raises(ConfigurationError) as resumed:
        await app.admin.resume(queue)
    assert resumed.value.code == "QUEUE_NAME_INVALID"
    assert await app.admin.pauses() == []


async def test_a_200_character_queue_name_is_taken(app: App) -> None:
    name = "q" * 200
    assert (await app.admin.pause(name)).queue == name
    assert [p.queue for p in await app.admin.pauses()] == [name]
    assert await app.admin.resume(name) is True


async def test_stats_show_a_paused_queue(app: App) -> None:
    ran: list[str] = []
    alpha, beta = declare(app, ran)
    await alpha.enqueue(1)
    await beta.enqueue(1)
    await app.admin.pause("qa", reason="deploy")
    await app.admin.pause("empty")  # no job at all: still listed
    stats = await app.admin.stats()
    queues = {q.queue: q for q in stats.queues}
    assert sorted(queues) == ["empty", "qa", "qb"]
    assert (queues["qa"].paused, queues["qa"].ready) == (True, 1)
    assert (queues["qb"].paused, queues["qb"].ready) == (False, 1)
    assert (queues["empty"].paused, queues["empty"].ready) == (True, 0)
    assert [p.queue for p in stats.paused] == ["empty", "qa"]
    names = {(n.queue, n.name): n for n in stats.names}
    assert names[("qa", "alpha")].paused is True and names[("qb", "beta")].paused is False
    snap = await app.admin.snapshot()
    assert [(p.queue, p.reason) for p in snap.paused] == [("empty", None), ("qa", "deploy")]
    await app.admin.resume("qa")
    queues = {q.queue: q for q in (await app.admin.stats()).queues}
    assert queues["qa"].paused is False
