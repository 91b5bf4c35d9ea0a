"""Enqueue on both drivers: refs, keys, delays, batches, and the refusals that write nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workhorse import App


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="emails.send", queue="emails", tenant=lambda p: p["org"])
    async def send(ctx, payload):  # type: ignore[no-untyped-def]
        return None

    return send


async def test_enqueue_stores_the_job_as_json(app: App) -> None:
    send = declare(app)
    payload = {"org": "o1", "to": "a@example.com", "tags": ("x", "y"), "n": 1.5}
    ref = await send.enqueue(payload)
    payload["to"] = "changed after enqueue"
    job = await app.get_job(ref.id)
    assert job is not None
    assert ref.duplicate is False
    assert (job.name, job.queue, job.tenant, job.state) == ("emails.send", "emails", "o1", "ready")
    assert job.payload == {"org": "o1", "to": "a@example.com", "tags": ["x", "y"], "n": 1.5}
    assert (job.attempt, job.max_attempts, job.result, job.last_error) == (0, 5, None, None)
    assert job.created_at.utcoffset() == timedelta(0)
    assert job.run_at <= job.created_at + timedelta(seconds=1)


async def test_unknown_id_answers_none(app: App) -> None:
    assert await app.get_job("01900000-0000-7000-8000-000000000000") is None
    assert await app.get_job("not-a-uuid") is None


async def test_live_key_returns_the_live_job(app: App) -> None:
    send = declare(app)
    first = await send.enqueue({"org": "o1"}, key="welcome:7")
    again = await send.enqueue({"org": "o1", "other": True}, key="welcome:7")
    other_tenant = await send.enqueue({"org": "o2"}, key="welcome:7")
    assert again.id == first.id and again.duplicate
    assert other_tenant.id != first.id and not other_tenant.duplicate
    # once the holder has finished, the key is free again
    await app.cancel(first.id)
    fresh = await send.enqueue({"org": "o1"}, key="welcome:7")
    assert fresh.id != first.id and not fresh.duplicate


async def test_enqueue_many_is_one_batch_with_duplicates_resolved(app: App) -> None:
    send = declare(app)
    held = await send.enqueue({"org": "o1"}, key="k0")
    refs = await send.enqueue_many([{"org": "o1", "i": i} for i in range(5)], keys=["k0", "k1", None, "k1", None])
    assert [r.duplicate for r in refs] == [True, False, False, True, False]
    assert refs[0].id == held.id
    assert refs[3].id == refs[1].id
    page = await app.list_jobs(limit=100)
    assert len(page.jobs) == 4
    assert await send.enqueue_many([]) == []


async def test_delay_and_run_at(app: App) -> None:
    send = declare(app)
    later = await send.enqueue({"org": "o1"}, delay="1h")
    past = await send.enqueue({"org": "o1"}, run_at=datetime(2001, 1, 1, tzinfo=UTC))
    job = await app.get_job(later.id)
    assert job is not None and job.state == "delayed"
    assert job.run_at - job.created_at > timedelta(minutes=59)
    before = await app.get_job(past.id)
    assert before is not None and before.state == "ready"
    promoted = await app.promote(later.id)
    assert promoted.state == "ready"
