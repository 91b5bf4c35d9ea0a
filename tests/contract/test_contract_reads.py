"""Operator verbs and listing on both drivers, including every refusal."""

from __future__ import annotations

from workhorse import App, JobContext, Retry

MISSING = "01900000-0000-7000-8000-000000000000"


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="task", tenant=lambda p: p["org"], retry=Retry(attempts=2, base=0))
    async def task(ctx: JobContext, payload: dict[str, object]) -> object:
        if payload.get("fail"):
            raise ValueError("fails")
        return payload.get("n")

    return task


async def test_list_is_newest_first_with_keyset_pages(app: App) -> None:
    task = declare(app)
    refs = [await task.enqueue({"org": "o1", "n": i}) for i in range(5)]
    first = await app.list_jobs(limit=2)
    assert [j.id for j in first.jobs] == [refs[4].id, refs[3].id]
    assert first.next is not None
    second = await app.list_jobs(limit=2, after=first.next)
    assert [j.id for j in second.jobs] == [refs[2].id, refs[1].id]
    third = await app.list_jobs(limit=2, after=second.next)
    assert [j.id for j in third.jobs] == [refs[0].id]
    assert third.next is None


async def test_list_filters(app: App) -> None:
    task = declare(app)
    await task.enqueue({"org": "o1"})
    await task.enqueue({"org": "o2"})
    await task.enqueue({"org": "o2"}, delay="1h")
    assert len((await app.list_jobs(tenant="o2")).jobs) == 2
    assert len((await app.list_jobs(state="delayed")).jobs) == 1
    assert len((await app.list_jobs(state="ready", tenant="o2")).jobs) == 1
    assert (await app.list_jobs(queue="elsewhere")).jobs == []
    assert len((await app.list_jobs(name="task")).jobs) == 3
