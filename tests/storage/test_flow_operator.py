"""What the operator surface says of fleet-wide caps: `app.admin.stats()` counts
per queue the due ready jobs a full cap holds back, `app.admin.why_waiting(job)` names the caps."""

from __future__ import annotations

from workhorse import App, Concurrency, JobContext, Limits, Rate


async def claim_all(app: App, names: list[str]) -> int:
    got = await app.driver.claim(
        worker_id="w-test", wants={"default": 50, "other": 50}, names=names, visibility=60, flow=app.flow_rules()
    )
    return len(got.claimed)


async def test_stats_and_why_name_each_full_cap(app: App) -> None:
    app.limits = Limits(per_tenant=2, rate_per_tenant=Rate(100, per="1h"))

    @app.job(name="named", tenant=lambda p: p["org"], concurrency=1)
    async def named(ctx: JobContext, payload: dict[str, str]) -> None: ...

    @app.job(name="keyed", tenant=lambda p: p["org"], concurrency=Concurrency(1, key=lambda p: p["k"]))
    async def keyed(ctx: JobContext, payload: dict[str, str]) -> None: ...

    @app.job(name="elsewhere", queue="other", tenant=lambda p: p["org"])
    async def elsewhere(ctx: JobContext, payload: dict[str, str]) -> None: ...

    await named.enqueue_many([{"org": "a"}] * 3)  # 1 runs (name cap), 2 wait
    await keyed.enqueue_many([{"org": "b", "k": "x"}] * 2 + [{"org": "b", "k": "y"}])  # x and y run, 1 x waits
    await elsewhere.enqueue_many([{"org": "b"}])  # tenant b is full (2): it waits
    assert await claim_all(app, ["named", "keyed", "elsewhere"]) == 3
    stats = await app.admin.stats()
    assert {q.queue: q.held_back for q in stats.queues} == {"default": 3, "other": 1}
    assert stats.queues[0].to_dict()["held_back"] == 3
    reasons = {}
    for job in (await app.list_jobs(state="ready")).jobs:
        reasons[job.name] = await app.admin.why_waiting(job)
    assert any("concurrency=1" in line for line in reasons["named"])
    assert any("key 'x'" in line for line in reasons["keyed"])
    assert any("tenant 'b' runs 2 of 2" in line for line in reasons["keyed"])
    assert reasons["elsewhere"] == ["tenant 'b' runs 2 of 2 (Limits(per_tenant=2))"]


async def test_nothing_is_held_back_without_caps_or_with_room(app: App) -> None:
    @app.job(name="free", tenant="none")
    async def free(ctx: JobContext, payload: None) -> None: ...

    await free.enqueue_many([None, None])
    stats = await app.admin.stats()
    assert [q.held_back for q in stats.queues] == [0]
    job = (await app.list_jobs(state="ready")).jobs[0]
    assert await app.admin.why_waiting(job) == []
    app.limits = Limits(total=10)
    assert [q.held_back for q in (await app.admin.stats()).queues] == [0]
    assert await app.admin.why_waiting(job) == []
