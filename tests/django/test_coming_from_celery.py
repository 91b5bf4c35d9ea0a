"""Coming from Celery (docs/guides/celery.md): each idiom's workhorse form run for real, the
Celery original in the comment above it. Plain workhorse on a fresh schema (``pg_app``), the
Django forms on the test project (``site``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from workhorse import App, Concurrency, JobContext, Limits, Rate, Retry, RetryAfter, TerminalError


async def burst(app: App, *queues: str) -> None:
    """What `workhorse worker --burst` does: run what is due, then stop."""
    await app.worker(queues=list(queues) or ["default"], handle_signals=False).run(burst=True)


async def test_delay_countdown_eta_queue_priority(pg_app: App) -> None:
    @pg_app.job(name="emails.send", tenant="none")
    async def send(ctx: JobContext, payload: dict[str, Any]) -> str:
        return f"sent to {payload['to']}"

    # send.delay("a@x.io")
    now = await send.enqueue({"to": "a@x.io"})
    # send.apply_async(("b@x.io",), countdown=60)
    later = await send.enqueue({"to": "b@x.io"}, delay="60s")
    # send.apply_async(("c@x.io",), eta=tomorrow_9am)
    eta = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    at = await send.enqueue({"to": "c@x.io"}, run_at=eta)
    # send.apply_async(("d@x.io",), queue="bulk", priority=9)
    bulk = await send.enqueue({"to": "d@x.io"}, queue="bulk", priority=9)

    jobs = {ref.id: await pg_app.get_job(ref.id) for ref in (now, later, at, bulk)}
    assert jobs[now.id].state == "ready"  # type: ignore[union-attr]
    waited = jobs[later.id].run_at - jobs[later.id].created_at  # type: ignore[union-attr]
    assert jobs[later.id].state == "delayed" and timedelta(seconds=59) < waited < timedelta(seconds=61)  # type: ignore[union-attr]
    assert jobs[at.id].run_at == eta  # type: ignore[union-attr]
    assert (jobs[bulk.id].queue, jobs[bulk.id].priority) == ("bulk", 9)  # type: ignore[union-attr]


async def test_result_get_and_revoke(pg_app: App) -> None:
    @pg_app.job(name="math.add", tenant="none")
    def add(ctx: JobContext, payload: dict[str, int]) -> int:
        return payload["a"] + payload["b"]

    ref = await add.enqueue({"a": 2, "b": 3})
    await burst(pg_app)
    # add.delay(2, 3).get(timeout=10)
    job = await pg_app.wait(ref, timeout="10s")
    assert (job.state, job.result) == ("done", 5)

    # celery_app.control.revoke(result.id)
    doomed = await add.enqueue({"a": 1, "b": 1}, delay="1h")
    assert (await pg_app.cancel(doomed.id)).state == "cancelled"


async def test_self_retry_with_countdown_is_retry_after(pg_app: App) -> None:
    # @shared_task(bind=True)
    # def sync(self, account):
    #     try: ...
    #     except RateLimited as exc:
    #         raise self.retry(exc=exc, countdown=exc.wait)
    @pg_app.job(name="accounts.sync", tenant="none", retry=Retry(attempts=5))
    def sync(ctx: JobContext, payload: dict[str, Any]) -> int:
        if ctx.attempt == 1:
            raise RetryAfter(0, "rate limited: the API said wait")  # seconds (0 here, so the test runs on)
        return ctx.attempt

    ref = await sync.enqueue({"account": 7})
    await burst(pg_app)
    job = await pg_app.wait(ref, timeout="10s")
    assert (job.state, job.result, job.attempt) == ("done", 2, 2)


async def test_autoretry_for_with_backoff_and_giving_up_early(pg_app: App) -> None:
    # @shared_task(autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
    # def fetch(url): ...
    @pg_app.job(name="feeds.fetch", tenant="none", retry=Retry(attempts=4, base=0))  # base="1s" in the guide
    def fetch(ctx: JobContext, payload: dict[str, str]) -> str:
        if payload["url"].startswith("bad:"):
            raise TerminalError("not a URL we can fetch")  # no retry for this one: dead now
        if ctx.attempt < 3:
            raise ConnectionError("connection reset")  # any other exception retries, with backoff
        return "fetched"

    flaky = await fetch.enqueue({"url": "https://example.test/feed"})
    hopeless = await fetch.enqueue({"url": "bad:feed"})
    await burst(pg_app)
    done, dead = await pg_app.wait(flaky, timeout="10s"), await pg_app.wait(hopeless, timeout="10s")
    assert (done.state, done.attempt, [e["type"] for e in done.errors]) == ("done", 3, ["ConnectionError"] * 2)
    assert (dead.state, dead.attempt, dead.last_error["type"]) == ("dead", 1, "TerminalError")  # type: ignore[index]


async def test_acks_late_is_the_default_and_the_idempotency_token(pg_app: App) -> None:
    # @shared_task(acks_late=True, reject_on_worker_lost=True)
    # def charge(order_id): payments.charge(order_id, idempotency_key=...)
    charged: list[str] = []

    @pg_app.job(name="payments.charge", tenant="none")
    def charge(ctx: JobContext, payload: dict[str, int]) -> str:
        charged.append(ctx.idempotency_token)  # the payment API dedupes on it: stable per attempt
        return ctx.idempotency_token

    ref = await charge.enqueue({"order": 12})
    await burst(pg_app)
    job = await pg_app.wait(ref, timeout="10s")
    assert job.result == f"{ref.id}:1" == charged[0]


async def test_time_limit_is_a_timeout(pg_app: App) -> None:
    # @shared_task(time_limit=300)
    @pg_app.job(name="reports.render", tenant="none", timeout="0.3s", retry=Retry(attempts=1))  # "5m" in the guide
    async def render(ctx: JobContext, payload: dict[str, Any]) -> str:
        await asyncio.sleep(30)  # cancelled at the time limit (a plain def checks ctx.cancelled)
        return "never"

    ref = await render.enqueue({})
    await burst(pg_app)
    job = await pg_app.wait(ref, timeout="10s")
    assert job.state == "dead" and job.result is None and job.last_error is not None


async def test_unique_task_is_a_key(pg_app: App) -> None:
    # celery-once / @shared_task(base=QueueOnce): one live run per order
    @pg_app.job(name="orders.invoice", tenant="none")
    def invoice(ctx: JobContext, payload: dict[str, int]) -> None:
        return None

    first = await invoice.enqueue({"order": 5}, key="invoice:5")
    second = await invoice.enqueue({"order": 5}, key="invoice:5")
    assert first.id == second.id


async def test_chain_is_durable_steps_and_group_is_enqueue_many(pg_app: App) -> None:
    # chain(fetch.s(url), resize.s(), publish.s())()
    def fetch(url: str) -> dict[str, str]:
        return {"image": f"bytes of {url}"}

    def resize(image: dict[str, str]) -> dict[str, str]:
        return {"thumb": image["image"][:8]}

    @pg_app.job(name="media.pipeline", tenant="none")
    async def pipeline(ctx: JobContext, payload: dict[str, str]) -> dict[str, str]:
        image = await ctx.step.run("fetch", fetch, payload["url"])  # each step's result is stored:
        return await ctx.step.run("resize", resize, image)  # a retry resumes after the last one done

    # group(pipeline.s(url) for url in urls)()
    refs = await pipeline.enqueue_many([{"url": "a.png"}, {"url": "b.png"}])
    await burst(pg_app)
    results = [(await pg_app.wait(ref, timeout="10s")).result for ref in refs]
    assert results == [{"thumb": "bytes of"}, {"thumb": "bytes of"}]


async def test_beat_schedule_is_app_task(pg_app: App) -> None:
    # app.conf.beat_schedule = {"daily-report": {"task": "reports.daily",
    #                                            "schedule": crontab(hour=9, minute=0)}}
    @pg_app.task(cron="0 9 * * *", timezone="Europe/Paris", tenant="none")
    def daily_report(ctx: JobContext, payload: dict[str, Any]) -> str:
        return payload["scheduled_at"]

    # app.conf.beat_schedule = {"poll": {"task": "feeds.poll", "schedule": 30.0}}
    @pg_app.task(every="30s", tenant="none")
    def poll(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    report = await pg_app.admin.tasks()
    described = {t.name: t for t in report.tasks}
    assert set(described) == {daily_report.name, poll.name}


async def test_rate_limit_and_one_at_a_time_per_key(database_url: str, schema: str) -> None:
    # @shared_task(rate_limit="10/s"), and a lock so one account syncs at a time
    app = App(database_url, schema=schema, limits=Limits(rate_per_tenant=Rate(10, per="1s")))

    @app.job(name="api.call", tenant=lambda p: p["account"], concurrency=Concurrency(1, key=lambda p: p["account"]))
    def call(ctx: JobContext, payload: dict[str, str]) -> None:
        return None

    async with app:
        await app.migrate()
        ref = await call.enqueue({"account": "a1"})
        job = await app.get_job(ref.id)
        assert job is not None and (job.tenant, job.flow_key) == ("a1", "a1")
        rules = app.flow_rules()
        assert rules is not None and rules.rate == (10, 1.0) and rules.keyed == {"api.call": (1, False)}


def test_on_commit_delay_is_an_enqueue_inside_atomic(site: dict[str, str]) -> None:
    pytest.importorskip("django")
    from django.db import transaction
    from shop.models import Order
    from shop.tasks import place_order

    # with transaction.atomic():
    #     order = Order.objects.create(...)
    #     transaction.on_commit(lambda: notify.delay(order.pk))
    with transaction.atomic():
        order = Order.objects.create(number=9)
        result = place_order.enqueue(order.number)  # commits with the order, or not at all
    assert place_order.get_result(result.id).status == "READY"
