"""``app.admin.list`` (filters, keyset pages both ways, refusals), progress and the errors history,
Bulk verbs, pauses and counters have their own files (test_bulk, test_pause,
test_counters)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext, Retry
from workhorse.types import ERRORS_KEPT, JobRef, Page, Settlement, StepFence

MISSING = "01900000-0000-7000-8000-000000000000"


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="task", tenant="none", retry=Retry(attempts=3, base=0, jitter=False))
    async def task(ctx: JobContext, payload: dict[str, Any]) -> object:
        if payload.get("fail"):
            raise ValueError(f"boom {ctx.attempt}")
        return payload.get("n")

    return task


async def enqueue_one_by_one(app: App, count: int) -> list[JobRef]:
    """``count`` jobs, each in its own statement, a little apart: distinct created_at values."""
    task = declare(app)
    refs = []
    for i in range(count):
        refs.append(await task.enqueue({"n": i}))
        await asyncio.sleep(0.002)
    return refs


def ids(page: Page) -> list[str]:
    return [j.id for j in page.jobs]


# -- filters ---------------------------------------------------------------------------------------


async def test_list_id_prefix_with_and_without_dashes_and_upper_case(app: App) -> None:
    refs = await enqueue_one_by_one(app, 6)
    every = {r.id for r in refs}
    hexes = {r.id: r.id.replace("-", "") for r in refs}
    target = refs[3].id

    # The whole id, in every spelling, finds exactly that job.
    for spelling in (target, target.upper(), hexes[target], hexes[target].upper()):
        assert ids(await app.admin.list(id_prefix=spelling)) == [target], spelling

    # A prefix with a dash in it (the first 13 characters: 8 digits, a dash, 4 digits).
    dashed = target[:13]
    expected = {i for i, h in hexes.items() if h.startswith(dashed.replace("-", ""))}
    assert target in expected
    assert set(ids(await app.admin.list(id_prefix=dashed))) == expected
    assert set(ids(await app.admin.list(id_prefix=dashed.upper()))) == expected

    # The shortest prefix only the target has, and the one a digit shorter (which others share).
    length = next(n for n in range(1, 33) if sum(h.startswith(hexes[target][:n]) for h in hexes.values()) == 1)
    unique = hexes[target][:length]
    assert ids(await app.admin.list(id_prefix=unique)) == [target]
    assert ids(await app.admin.list(id_prefix=unique.upper())) == [target]
    shared = hexes[target][: length - 1]
    want = [r.id for r in reversed(refs) if hexes[r.id].startswith(shared)]
    assert len(want) >= 2
    assert ids(await app.admin.list(id_prefix=shared)) == want  # newest first

    # One digit: what Python says, on both drivers (uuid7 ids of today all start with '0').
    assert set(ids(await app.admin.list(id_prefix="0"))) == every
    assert ids(await app.admin.list(id_prefix="f")) == []
    assert ids(await app.admin.list(id_prefix="F")) == []
    # The last digit differs: the range is inclusive at both ends, and exact.
    last = hexes[target][-1]
    other = "0" if last != "0" else "1"
    assert ids(await app.admin.list(id_prefix=hexes[target][:-1] + other)) == []


async def test_list_id_prefix_narrows_with_other_filters_and_pages(app: App) -> None:
    refs = await enqueue_one_by_one(app, 5)
    common = "0"
    first = await app.admin.list(id_prefix=common, limit=2)
    assert ids(first) == [refs[4].id, refs[3].id]
    second = await app.admin.list(id_prefix=common, limit=2, after=first.next)
    assert ids(second) == [refs[2].id, refs[1].id]
    assert ids(await app.admin.list(id_prefix=refs[0].id, state="ready")) == [refs[0].id]
    assert ids(await app.admin.list(id_prefix=refs[0].id, state="dead")) == []
    assert ids(await app.admin.list(id_prefix=refs[0].id, queue="elsewhere")) == []


async def test_list_created_from_inclusive_and_created_to_exclusive(app: App) -> None:
    refs = await enqueue_one_by_one(app, 5)
    jobs = [await app.admin.get(r.id) for r in refs]
    created = [j.created_at for j in jobs]  # type: ignore[union-attr]
    assert created == sorted(created) and len(set(created)) == 5
    rid = [r.id for r in refs]

    assert ids(await app.admin.list(created_from=created[1], created_to=created[3])) == [rid[2], rid[1]]
    assert ids(await app.admin.list(created_from=created[4])) == [rid[4]]
    assert ids(await app.admin.list(created_from=created[0])) == list(reversed(rid))
    assert ids(await app.admin.list(created_to=created[0])) == []
    assert ids(await app.admin.list(created_to=created[1])) == [rid[0]]
    assert ids(await app.admin.list(created_from=created[2], created_to=created[2])) == []
    assert ids(await app.admin.list(created_from=created[3], created_to=created[1])) == []
    # Paged inside a window.
    window = await app.admin.list(created_from=created[1], limit=2)
    assert ids(window) == [rid[4], rid[3]] and window.next == rid[3]
    rest = await app.admin.list(created_from=created[1], limit=2, after=window.next)
    assert ids(rest) == [rid[2], rid[1]]
    # The same instant in another time zone is the same bound.
    elsewhere = created[2].astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert ids(await app.admin.list(created_from=elsewhere)) == [rid[4], rid[3], rid[2]]


async def test_list_state_filter_reports_a_due_delayed_job_ready(app: App) -> None:
    task = declare(app)
    due_soon = await task.enqueue({"n": 1}, delay="150ms")
    later = await task.enqueue({"n": 2}, delay="1h")
    now = await task.enqueue({"n": 3})
    assert ids(await app.admin.list(state="delayed")) == [later.id, due_soon.id]
    assert ids(await app.admin.list(state="ready")) == [now.id]
    await asyncio.sleep(0.3)
    assert ids(await app.admin.list(state="ready")) == [now.id, due_soon.id]
    assert ids(await app.admin.list(state="delayed")) == [later.id]
    job = await app.admin.get(due_soon.id)
    assert job is not None and job.state == "ready"


# -- keyset pages, both ways -----------------------------------------------------------------------


async def test_list_pages_back_and_forth_return_the_same_rows(app: App) -> None:
    refs = await enqueue_one_by_one(app, 8)
    r = [x.id for x in refs]  # r[7] newest

    p1 = await app.admin.list(limit=3)
    assert ids(p1) == [r[7], r[6], r[5]]
    assert (p1.next, p1.prev) == (r[5], None)
    p2 = await app.admin.list(limit=3, after=p1.next)
    assert ids(p2) == [r[4], r[3], r[2]]
    assert (p2.next, p2.prev) == (r[2], r[4])
    p3 = await app.admin.list(limit=3, after=p2.next)
    assert ids(p3) == [r[1], r[0]]
    assert (p3.next, p3.prev) == (None, r[1])

    back2 = await app.admin.list(limit=3, before=p3.prev)
    assert ids(back2) == ids(p2)
    assert (back2.next, back2.prev) == (r[2], r[4])
    back1 = await app.admin.list(limit=3, before=back2.prev)
    assert ids(back1) == ids(p1)
    # A full page read backwards cannot know it is the first: prev names its first row ...
    assert (back1.next, back1.prev) == (r[5], r[7])
    # ... and the page before it is empty, with no links at all.
    empty = await app.admin.list(limit=3, before=back1.prev)
    assert (ids(empty), empty.next, empty.prev) == ([], None, None)

    # Forward again from a page read backwards.
    again = await app.admin.list(limit=3, after=back1.next)
    assert ids(again) == ids(p2)

    # A short page read backwards is the first page: prev None, next its last row.
    odd = await app.admin.list(limit=3, after=r[6])
    assert ids(odd) == [r[5], r[4], r[3]]
    top = await app.admin.list(limit=3, before=odd.prev)
    assert ids(top) == [r[7], r[6]]
    assert (top.next, top.prev) == (r[6], None)

    # Past the oldest row: empty, no links.
    bottom = await app.admin.list(limit=3, after=r[0])
    assert (ids(bottom), bottom.next, bottom.prev) == ([], None, None)
    # before the newest row: empty, no links.
    above = await app.admin.list(limit=3, before=r[7])
    assert (ids(above), above.next, above.prev) == ([], None, None)


async def test_list_before_with_filters_takes_the_nearest_newer_rows(app: App) -> None:
    @app.job(name="a", tenant="none")
    async def a(ctx: JobContext, payload: int) -> None:
        return None

    @app.job(name="b", tenant="none")
    async def b(ctx: JobContext, payload: int) -> None:
        return None

    made: list[tuple[str, str]] = []
    for i in range(10):
        handle = a if i % 2 == 0 else b
        made.append((handle.name, (await handle.enqueue(i)).id))
        await asyncio.sleep(0.002)
    only_a = [job_id for name, job_id in reversed(made) if name == "a"]  # newest first: 5 rows
    assert len(only_a) == 5
    forward = await app.admin.list(name="a", limit=2, after=only_a[3])
    assert ids(forward) == [only_a[4]]
    assert forward.next is None and forward.prev == only_a[4]
    back = await app.admin.list(name="a", limit=2, before=only_a[4])
    assert ids(back) == [only_a[2], only_a[3]]
    assert (back.next, back.prev) == (only_a[3], only_a[2])
    # A cursor may be a row the filter does not match (the page still starts right after it).
    b_row = next(job_id for name, job_id in made if name == "b")  # the oldest 'b', made[1]
    older_a = await app.admin.list(name="a", after=b_row)
    assert ids(older_a) == [made[0][1]]
    newer_a = await app.admin.list(name="a", limit=2, before=b_row)
    assert ids(newer_a) == [made[4][1], made[2][1]]


async def test_list_pages_through_rows_sharing_one_created_at(app: App) -> None:
    """One batch is one statement: its rows share created_at, and pages still split by id."""
    task = declare(app)
    refs = await task.enqueue_many([{"n": i} for i in range(7)])
    newest_first = sorted((r.id for r in refs), reverse=True)
    jobs = [await app.admin.get(r.id) for r in refs]
    assert len({j.created_at for j in jobs if j is not None}) == 1

    p1 = await app.admin.list(limit=3)
    p2 = await app.admin.list(limit=3, after=p1.next)
    p3 = await app.admin.list(limit=3, after=p2.next)
    assert ids(p1) + ids(p2) + ids(p3) == newest_first
    assert (p3.next, len(p3.jobs)) == (None, 1)
    back2 = await app.admin.list(limit=3, before=p3.prev)
    back1 = await app.admin.list(limit=3, before=back2.prev)
    assert (ids(back2), ids(back1)) == (ids(p2), ids(p1))
    # The created_at window holds all of them, or none.
    created = jobs[0].created_at  # type: ignore[union-attr]
    assert len((await app.admin.list(created_from=created)).jobs) == 7
    assert (await app.admin.list(created_to=created)).jobs == []


# -- refusals --------------------------------------------------------------------------------------


async def listing(app: App) -> list[tuple[str, str]]:
    return [(j.id, j.state) for j in (await app.admin.list(limit=200)).jobs]


@pytest.mark.parametrize("limit", [0, 201, -1, True, 2.0, "10"])
async def test_list_limit_refused(app: App, limit: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.list(limit=limit)
    assert refused.value.code == "PAGE_LIMIT_INVALID"


async def test_list_limit_bounds_taken(app: App) -> None:
    refs = await enqueue_one_by_one(app, 3)
    one = await app.admin.list(limit=1)
    assert ids(one) == [refs[2].id] and one.next == refs[2].id
    assert len((await app.admin.list(limit=200)).jobs) == 3


async def test_list_refuses_both_cursors_and_cursors_that_are_no_position(app: App) -> None:
    refs = await enqueue_one_by_one(app, 2)
    before = await listing(app)
    with pytest.raises(ConfigurationError) as both:
        await app.admin.list(after=refs[0].id, before=refs[1].id)
    assert both.value.code == "PAGE_CURSOR_INVALID"
    # Not a uuid: a job's id with a leading space, or in braces, is no cursor.
    cursors: tuple[Any, ...] = ("not-a-uuid", "", " " + refs[1].id, "{" + refs[1].id + "}", refs[1].id[:-1], 7)
    for cursor in cursors:
        with pytest.raises(ConfigurationError) as after:
            await app.admin.list(after=cursor)
        assert after.value.code == "PAGE_CURSOR_INVALID", cursor
        assert "after" in after.value.cause and repr(cursor) in after.value.cause, after.value.cause
        assert after.value.fix, cursor
        with pytest.raises(ConfigurationError) as older:
            await app.admin.list(before=cursor)
        assert older.value.code == "PAGE_CURSOR_INVALID", cursor
        assert "before" in older.value.cause, older.value.cause
    assert await listing(app) == before


async def test_a_cursor_naming_no_job_is_a_position(app: App) -> None:
    """A cursor is a place in id order, not a row: an id no job has (older than every job here)
    answers the rows beyond it, and the same id spelled without dashes or in capitals is the same
    position."""
    refs = await enqueue_one_by_one(app, 3)
    newest_first = [r.id for r in reversed(refs)]
    assert (await app.admin.list(after=MISSING)).jobs == []
    assert ids(await app.admin.list(before=MISSING)) == newest_first
    for spelled in (refs[1].id.upper(), refs[1].id.replace("-", "")):
        after = await app.admin.list(after=spelled)
        assert (ids(after), after.prev) == ([refs[0].id], refs[0].id)
        before = await app.admin.list(before=spelled)
        assert (ids(before), before.next) == ([refs[2].id], refs[2].id)


async def make_dead(app: App, count: int) -> list[str]:
    """``count`` dead jobs, oldest first (each enqueued on its own, a little apart)."""

    @app.job(name="fragile", tenant="none", retry=Retry(attempts=1))
    async def fragile(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise ValueError("fails")

    made = []
    for i in range(count):
        made.append((await fragile.enqueue({"n": i})).id)
        await asyncio.sleep(0.002)
    await app.worker().run(burst=True)
    assert [j.id for j in (await app.admin.list(state="dead", limit=200)).jobs] == made[::-1]
    return made


@pytest.mark.parametrize("verb", ["remove", "requeue"])
async def test_a_cursor_outlives_the_job_it_names(app: App, verb: str) -> None:
    """The dead-letter runbook: `ls --state dead`, fix (rm or requeue) the jobs shown, follow
    `next`. The job a cursor names may be gone (or no longer dead); the cursor is its position,
    and the pages beyond it still come, none twice, none skipped. The same for `prev`."""
    dead = (await make_dead(app, 8))[::-1]  # newest first, as pages read
    act = getattr(app.admin, verb)

    first = await app.admin.list(state="dead", limit=3)
    assert ids(first) == dead[0:3] and first.next == dead[2]
    for job_id in ids(first):  # the operator fixes every job the page shows, the cursor's one too
        await act(job_id)
    second = await app.admin.list(state="dead", limit=3, after=first.next)
    assert ids(second) == dead[3:6]
    assert (second.next, second.prev) == (dead[5], dead[3])
    await act(second.next)
    third = await app.admin.list(state="dead", limit=3, after=second.next)
    assert ids(third) == dead[6:8] and third.next is None

    # Backwards: the job `prev` names is fixed, and the rows newer than its place still come.
    await act(third.prev)
    assert third.prev == dead[6]
    back = await app.admin.list(state="dead", limit=3, before=third.prev)
    assert ids(back) == dead[3:5]  # dead[5] was fixed; dead[0:3] too
    assert (back.next, back.prev) == (dead[4], None)
    # Without the state filter the removed rows are gone and the requeued ones are listed again.
    beyond = await app.admin.list(limit=200, after=dead[2])
    kept = dead[3:8] if verb == "requeue" else [dead[3], dead[4], dead[7]]
    assert ids(beyond) == kept
    # The oldest job, its id a cursor, gone or requeued: nothing is past it.
    await act(dead[7])
    assert (await app.admin.list(state="dead", after=dead[7])).jobs == []


async def test_list_refuses_a_cursor_with_a_trailing_newline(app: App) -> None:
    """`$` in a regex matches before a final newline: a cursor check must not let one through."""
    refs = await enqueue_one_by_one(app, 2)
    for which in ("after", "before"):
        with pytest.raises(ConfigurationError) as refused:
            await app.admin.list(**{which: refs[0].id + "\n"})
        assert refused.value.code == "PAGE_CURSOR_INVALID"


@pytest.mark.parametrize("prefix", ["xyz", "", "0" * 33, "-", "12g4", " 0190", "0\n", "0190\n", 7])
async def test_list_refuses_a_bad_id_prefix(app: App, prefix: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.list(id_prefix=prefix)
    assert refused.value.code == "ID_PREFIX_INVALID"


async def test_list_refuses_naive_datetimes_and_unknown_states(app: App) -> None:
    for what in ("created_from", "created_to"):
        with pytest.raises(ConfigurationError) as naive:
            await app.admin.list(**{what: datetime(2026, 1, 1)})
        assert what in naive.value.cause
        with pytest.raises(ConfigurationError):
            await app.admin.list(**{what: "2026-01-01"})
    assert (await app.admin.list(created_from=datetime(2000, 1, 1, tzinfo=UTC))).jobs == []
    with pytest.raises(ConfigurationError) as unknown:
        await app.admin.list(state="stuck")
    assert unknown.value.code == "STATE_UNKNOWN"


# -- progress --------------------------------------------------------------------------------------


def report(fraction: float, message: str) -> str:
    return json.dumps(
        {"fraction": fraction, "done": None, "total": None, "message": message, "at": "2026-01-01T00:00:00Z"}
    )


async def claim_one(app: App, name: str = "task", queue: str = "default") -> Any:
    result = await app.driver.claim(worker_id="w1", wants={queue: 1}, names=[name], visibility=30)
    assert len(result.claimed) == 1
    return result.claimed[0]


async def test_record_progress_writes_a_batch_in_order_each_on_its_own_fence(app: App) -> None:
    task = declare(app)
    a, b = await task.enqueue({"n": 1}), await task.enqueue({"n": 2})
    result = await app.driver.claim(worker_id="w1", wants={"default": 2}, names=["task"], visibility=30)
    claims = {c.id: c.claims for c in result.claimed}
    assert set(claims) == {a.id, b.id}
    landed = await app.driver.record_progress(
        [
            (StepFence(a.id, "w1", claims[a.id]), report(0.25, "a")),
            (StepFence(b.id, "w2", claims[b.id]), report(0.5, "b, wrong worker")),
            (StepFence("not-a-job-id", "w1", 1), report(0.5, "no such id")),
            (StepFence(b.id, "w1", claims[b.id]), report(0.75, "b")),
        ]
    )
    assert landed == [True, False, False, True]
    first, second = await app.admin.get(a.id), await app.admin.get(b.id)
    assert first is not None and first.progress is not None and first.progress["message"] == "a"
    assert second is not None and second.progress is not None and second.progress["message"] == "b"
    assert await app.driver.record_progress([]) == []


async def test_record_progress_lands_only_for_the_claim_holder(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue({"n": 1})
    # Not running yet: nobody holds it.
    assert await app.driver.record_progress([(StepFence(ref.id, "w1", 1), report(0.1, "early"))]) == [False]
    held = await claim_one(app)
    assert held.claims == 1
    assert await app.driver.record_progress([(StepFence(ref.id, "w1", 2), report(0.2, "wrong claims"))]) == [False]
    assert await app.driver.record_progress([(StepFence(ref.id, "w2", 1), report(0.2, "wrong worker"))]) == [False]
    assert await app.driver.record_progress([(StepFence(MISSING, "w1", 1), report(0.2, "no such job"))]) == [False]
    job = await app.admin.get(ref.id)
    assert job is not None and job.progress is None

    assert await app.driver.record_progress([(StepFence(ref.id, "w1", 1), report(0.5, "half"))]) == [True]
    job = await app.admin.get(ref.id)
    assert job is not None and job.progress == json.loads(report(0.5, "half"))
    assert isinstance(job.progress, dict)
    assert job.to_dict()["progress"] == job.progress
    listed = (await app.admin.list()).jobs[0]
    assert listed.progress == json.loads(report(0.5, "half"))

    # A later report replaces the earlier one.
    assert await app.driver.record_progress([(StepFence(ref.id, "w1", 1), report(0.75, "most"))]) == [True]
    job = await app.admin.get(ref.id)
    assert job is not None and job.progress is not None and job.progress["message"] == "most"

    # Settled: no longer held, the report stays.
    assert await app.driver.settle([Settlement(ref.id, "w1", 1, "done", result="1")]) == [True]
    assert await app.driver.record_progress([(StepFence(ref.id, "w1", 1), report(0.9, "late"))]) == [False]
    job = await app.admin.get(ref.id)
    assert job is not None and job.state == "done" and job.progress is not None
    assert job.progress["message"] == "most"


async def test_settlement_progress_is_stored_and_none_keeps_the_last_report(app: App) -> None:
    task = declare(app)
    first = await task.enqueue({"n": 1})
    second = await task.enqueue({"n": 2})
    a = await claim_one(app)
    b = await claim_one(app)
    assert {a.id, b.id} == {first.id, second.id}
    assert await app.driver.record_progress([(StepFence(b.id, "w1", b.claims), report(0.4, "flushed"))]) == [True]
    landed = await app.driver.settle(
        [
            Settlement(a.id, "w1", a.claims, "done", result="1", progress=report(1.0, "final")),
            Settlement(b.id, "w1", b.claims, "done", result="2"),
        ]
    )
    assert landed == [True, True]
    job_a = await app.admin.get(a.id)
    job_b = await app.admin.get(b.id)
    assert job_a is not None and job_a.progress == json.loads(report(1.0, "final"))
    assert job_b is not None and job_b.progress == json.loads(report(0.4, "flushed"))

    # A settle that does not land writes no progress either.
    third = await task.enqueue({"n": 3})
    c = await claim_one(app)
    assert c.id == third.id
    stale = Settlement(c.id, "w1", c.claims + 1, "done", result="3", progress=report(1.0, "stale"))
    assert await app.driver.settle([stale]) == [False]
    job_c = await app.admin.get(c.id)
    assert job_c is not None and job_c.state == "running" and job_c.progress is None

    # A retry carries progress too.
    retried = Settlement(
        c.id, "w1", c.claims, "retry", error=json.dumps({"type": "E", "message": "m"}), progress=report(0.3, "r")
    )
    assert await app.driver.settle([retried]) == [True]
    job_c = await app.admin.get(c.id)
    assert job_c is not None and job_c.state == "ready" and job_c.progress == json.loads(report(0.3, "r"))


async def test_requeue_clears_progress_and_keeps_the_errors(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue({"n": 1})
    held = await claim_one(app)
    error = json.dumps({"type": "ValueError", "message": "bad", "traceback": "tb"})
    settled = Settlement(held.id, "w1", held.claims, "dead", error=error, progress=report(0.6, "stuck"))
    assert await app.driver.settle([settled]) == [True]
    dead = await app.admin.get(ref.id)
    assert dead is not None and dead.state == "dead" and dead.progress is not None
    assert [(e["attempt"], e["type"], e["message"]) for e in dead.errors] == [(1, "ValueError", "bad")]

    again = await app.admin.requeue(ref.id)
    assert (again.state, again.attempt, again.progress) == ("ready", 0, None)
    stored = await app.admin.get(ref.id)
    assert stored is not None and stored.progress is None
    assert stored.last_error is not None and stored.last_error["message"] == "bad"
    assert [(e["attempt"], e["type"], e["message"]) for e in stored.errors] == [(1, "ValueError", "bad")]


async def test_bulk_requeue_clears_progress(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue({"n": 1})
    held = await claim_one(app)
    error = json.dumps({"type": "ValueError", "message": "bad", "traceback": None})
    settled = Settlement(held.id, "w1", held.claims, "failed", error=error, progress=report(0.6, "stuck"))
    assert await app.driver.settle([settled]) == [True]
    result = await app.admin.requeue_many(state="failed")
    assert (result.affected, result.remaining) == (1, 0)
    job = await app.admin.get(ref.id)
    assert job is not None and (job.state, job.attempt, job.progress) == ("ready", 0, None)
    assert len(job.errors) == 1


# -- the errors history --------------------------------------------------------------------------


async def test_errors_list_each_failed_attempt_in_order(app: App) -> None:
    task = declare(app)
    failing = await task.enqueue({"fail": True})
    fine = await task.enqueue({"n": 1})
    await app.worker().run(burst=True)
    job = await app.admin.get(failing.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 3)
    assert [(e["attempt"], e["type"], e["message"]) for e in job.errors] == [
        (1, "ValueError", "boom 1"),
        (2, "ValueError", "boom 2"),
        (3, "ValueError", "boom 3"),
    ]
    for entry in job.errors:
        assert set(entry) == {"attempt", "type", "message", "at"}
        at = datetime.fromisoformat(str(entry["at"]).replace("Z", "+00:00"))
        assert at.utcoffset() is not None
        assert job.created_at <= at.astimezone(UTC) <= job.updated_at
    ats = [datetime.fromisoformat(str(e["at"]).replace("Z", "+00:00")) for e in job.errors]
    assert ats == sorted(ats)
    assert job.to_dict()["errors"] == job.errors
    listed = next(j for j in (await app.admin.list()).jobs if j.id == failing.id)
    assert listed.errors == job.errors
    # The traceback stays in last_error only.
    assert job.last_error is not None and "traceback" in job.last_error
    ok = await app.admin.get(fine.id)
    assert ok is not None and ok.state == "done" and ok.errors == []


async def test_errors_keep_only_the_last_ten_attempts(app: App) -> None:
    attempts = ERRORS_KEPT + 2

    @app.job(name="stubborn", tenant="none", retry=Retry(attempts=attempts, base=0, jitter=False))
    async def stubborn(ctx: JobContext, payload: None) -> None:
        raise RuntimeError(f"try {ctx.attempt}")

    ref = await stubborn.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.admin.get(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", attempts)
    assert [e["attempt"] for e in job.errors] == list(range(attempts - ERRORS_KEPT + 1, attempts + 1))
    assert [e["message"] for e in job.errors][-1] == f"try {attempts}"
    assert all(e["type"] == "RuntimeError" for e in job.errors)


async def test_errors_survive_a_requeue_and_grow_on_the_next_run(app: App) -> None:
    @app.job(name="twice", tenant="none", retry=Retry(attempts=1))
    async def twice(ctx: JobContext, payload: None) -> None:
        raise KeyError("missing")

    ref = await twice.enqueue(None)
    await app.worker().run(burst=True)
    await app.admin.requeue(ref.id)
    await app.worker().run(burst=True)
    job = await app.admin.get(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "KeyError"), (1, "KeyError")]


async def test_a_lease_that_lapses_on_the_final_attempt_is_recorded_in_errors(app: App) -> None:
    @app.job(name="lost", tenant="none", retry=Retry(attempts=1))
    async def lost(ctx: JobContext, payload: None) -> None:
        return None

    ref = await lost.enqueue(None)
    first = await app.driver.claim(worker_id="gone", wants={"default": 1}, names=["lost"], visibility=0.1)
    assert [c.id for c in first.claimed] == [ref.id]
    await asyncio.sleep(0.4)
    second = await app.driver.claim(worker_id="w2", wants={"default": 1}, names=["lost"], visibility=30)
    assert second.claimed == [] and [b.id for b in second.buried] == [ref.id]
    job = await app.admin.get(ref.id)
    assert job is not None and job.state == "dead"
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseLapsed")]
