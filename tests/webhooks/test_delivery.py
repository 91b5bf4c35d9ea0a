"""Deliveries against a real HTTP server on 127.0.0.1: the signature, each status class, the
ledger, Retry-After, redirects, auto-disable and manual enable, SSRF at delivery, secrets kept."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from typing import Any

import psycopg
import pytest
from standardwebhooks import Webhook

from webhookkit import POLICY, Receiver, Reply
from workhorse import App, JobContext, Retry
from workhorse.errors import ConfigurationError, LeaseLostError
from workhorse.webhooks import Endpoint, WebhookError, WebhookPolicy, verify
from workhorse.webhooks.deliver import attempt
from workhorse.webhooks.guard import Target, check_url
from workhorse.webhooks.wire import post


async def drain(app: App) -> None:
    await app.worker(queues=["webhooks"], concurrency=2, handle_signals=False).run(burst=True)


async def add(app: App, receiver: Receiver, **options: Any) -> Endpoint:
    return await app.webhooks.add_endpoint(receiver.url, tenant="o1", events=["order.paid"], **options)


def rows(app: App, database_url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(statement.replace("{schema}", app.schema), params).fetchall()  # type: ignore[arg-type]


async def test_a_delivery_verified_by_standardwebhooks(hook_app: App, receiver: Receiver) -> None:
    endpoint = await add(hook_app, receiver)
    assert endpoint.secret and endpoint.secret.startswith("whsec_")
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {"order": 42})
    await drain(hook_app)
    [got] = receiver.received
    assert got.path == "/hooks"
    document = Webhook(endpoint.secret).verify(got.body, got.headers)
    assert document["type"] == "order.paid" and document["data"] == {"order": 42}
    assert verify(body=got.body, headers=got.headers, secret=endpoint.secret)["data"] == {"order": 42}
    assert got.headers["host"] == f"127.0.0.1:{receiver.port}"
    job = await hook_app.get_job(ref.id)
    assert job is not None and job.state == "done"
    page = await hook_app.webhooks.deliveries(endpoint.id)
    [row] = page.deliveries
    assert (row.status, row.response_code, row.attempt, row.job_id) == ("delivered", 200, 1, ref.id)
    assert row.message_id == got.headers["webhook-id"] and row.response_excerpt == "ok"
    assert row.latency_ms is not None and row.latency_ms > 0


async def test_retries_resend_the_same_message_and_every_attempt_is_recorded(hook_app: App, receiver: Receiver) -> None:
    endpoint = await add(hook_app, receiver)
    receiver.script = [Reply(500, body=b"boom"), Reply(302, {"location": "http://169.254.169.254/"}), Reply(200)]
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {"order": 1})
    await drain(hook_app)
    assert [r.path for r in receiver.received] == ["/hooks"] * 3  # the redirect was never followed
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1
    assert len({r.body for r in receiver.received}) == 1
    page = await hook_app.webhooks.deliveries(endpoint.id)
    assert [(d.attempt, d.status, d.response_code) for d in page.deliveries] == [
        (3, "delivered", 200), (2, "failed", 302), (1, "failed", 500),
    ]  # fmt: skip
    assert "not followed" in (page.deliveries[1].error or "") and page.deliveries[2].response_excerpt == "boom"
    job = await hook_app.get_job(ref.id)
    assert job is not None and job.state == "done"
    assert (await hook_app.webhooks.endpoint(endpoint.id)).consecutive_failures == 0  # a delivery resets it


async def test_a_410_disables_the_endpoint_and_sends_refuse(hook_app: App, receiver: Receiver) -> None:
    endpoint = await add(hook_app, receiver)
    receiver.default = Reply(410)
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    await drain(hook_app)
    assert len(receiver.received) == 1
    job = await hook_app.get_job(ref.id)
    assert job is not None and job.state == "dead"
    found = await hook_app.webhooks.endpoint(endpoint.id)
    assert not found.enabled and "410" in (found.disabled_reason or "")
    with pytest.raises(WebhookError) as caught:
        await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    assert caught.value.code == "WEBHOOK_ENDPOINT_DISABLED"


async def test_consecutive_failures_disable_and_only_an_operator_enables(
    hook_app: App, receiver: Receiver, database_url: str
) -> None:
    endpoint = await add(hook_app, receiver, disable_after=2)
    receiver.default = Reply(500)
    first = await hook_app.webhooks.send(endpoint.id, "order.paid", {"n": 1})
    second = await hook_app.webhooks.send(endpoint.id, "order.paid", {"n": 2})
    await drain(hook_app)
    assert len(receiver.received) == 2  # disabled at the 2nd failure: every later attempt checked first
    found = await hook_app.webhooks.endpoint(endpoint.id)
    assert not found.enabled and found.disabled_reason == "2 consecutive failed attempts"
    statuses = sorted(d.status for d in (await hook_app.webhooks.deliveries(endpoint.id)).deliveries)
    assert statuses == ["failed", "failed", "skipped"]  # the next attempt made no request
    for ref in (first, second):
        job = await hook_app.get_job(ref.id)
        assert job is not None and job.state == "dead"
    enabled = await hook_app.webhooks.enable(endpoint.id)
    assert enabled.enabled and enabled.consecutive_failures == 0
    receiver.default = Reply(200)
    await hook_app.requeue(first.id)
    await drain(hook_app)
    assert len(receiver.received) == 3
    assert (await hook_app.get_job(first.id)).state == "done"  # type: ignore[union-attr]


async def test_retry_after_seconds_is_honoured(hook_app: App, receiver: Receiver, database_url: str) -> None:
    endpoint = await add(hook_app, receiver)
    receiver.default = Reply(429, {"retry-after": "120"})
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    await drain(hook_app)  # one attempt; the retry waits
    assert len(receiver.received) == 1
    [(state, wait)] = rows(
        hook_app, database_url,
        "select state, extract(epoch from run_at - now())::float8 from {schema}.jobs where id = %s", ref.id,
    )  # fmt: skip
    assert state == "delayed" and 110 <= wait <= 133  # 120 s, spread up to 10% later
    [d] = (await hook_app.webhooks.deliveries(endpoint.id)).deliveries
    assert (d.status, d.response_code) == ("throttled", 429) and "Retry-After 120s" in (d.error or "")


async def test_retry_after_http_date_is_measured_against_the_response_date(
    hook_app: App, receiver: Receiver, database_url: str
) -> None:
    endpoint = await add(hook_app, receiver)
    # The receiver's clock is a year off; only the difference between its two dates counts.
    headers = {"retry-after": "Wed, 21 Oct 2015 07:29:00 GMT", "date": "Wed, 21 Oct 2015 07:28:00 GMT"}
    receiver.script = [Reply(503, headers)]
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    await drain(hook_app)
    [(wait,)] = rows(
        hook_app, database_url, "select extract(epoch from run_at - now())::float8 from {schema}.jobs where id = %s",
        ref.id,
    )  # fmt: skip
    assert 50 <= wait <= 67


async def test_an_address_refused_at_delivery_is_recorded_and_ends_the_job(
    database_url: str, schema: str, receiver: Receiver
) -> None:
    # Added while private addresses were allowed; delivered by an app that forbids them.
    loose = App(database_url, schema=schema, webhooks=WebhookPolicy(allow_private=True, allow_http=True))
    await loose.migrate()
    endpoint = await loose.webhooks.add_endpoint(
        f"http://localhost:{receiver.port}/hooks", tenant="o1", events=["order.paid"]
    )
    ref = await loose.webhooks.send(endpoint.id, "order.paid", {})
    await loose.close()
    strict = App(database_url, schema=schema, webhooks=WebhookPolicy(allow_http=True))
    try:
        await drain(strict)
        assert receiver.received == []
        [d] = (await strict.webhooks.deliveries(endpoint.id)).deliveries
        assert d.status == "refused" and (d.error or "").startswith("WEBHOOK_ADDRESS_REFUSED")
        job = await strict.get_job(ref.id)
        assert job is not None and job.state == "dead"
        with pytest.raises(WebhookError) as caught:
            await strict.webhooks.add_endpoint(receiver.url, tenant="o1")
        assert caught.value.code == "WEBHOOK_ADDRESS_REFUSED"
    finally:
        await strict.close()


async def test_a_slow_receiver_times_out_as_a_recorded_failure(
    database_url: str, schema: str, receiver: Receiver
) -> None:
    policy = WebhookPolicy(allow_private=True, allow_http=True, timeout="0.5s", retry=Retry(attempts=1))
    app = App(database_url, schema=schema, webhooks=policy)
    await app.migrate()
    try:
        endpoint = await app.webhooks.add_endpoint(receiver.url, tenant="o1")
        receiver.default = Reply(200, delay=2)
        await app.webhooks.send(endpoint.id, "anything", {})
        await drain(app)
        [d] = (await app.webhooks.deliveries(endpoint.id)).deliveries
        assert d.status == "failed" and "timeout" in (d.error or "")
    finally:
        await app.close()


async def test_the_secret_is_never_stored_or_logged_outside_its_row(
    hook_app: App, receiver: Receiver, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint = await add(hook_app, receiver)
    rotated = await hook_app.webhooks.rotate_secret(endpoint.id)
    assert rotated.rotating and rotated.secret != endpoint.secret
    receiver.script = [Reply(500, body=b"nope"), Reply(200)]
    await hook_app.webhooks.send(endpoint.id, "order.paid", {"order": 7})
    await drain(hook_app)
    got = receiver.received[-1]
    for secret in (endpoint.secret, rotated.secret):  # both sign during the grace period
        assert secret and Webhook(secret).verify(got.body, got.headers)
    dumped = rows(
        hook_app, database_url,
        "select (select coalesce(json_agg(j), '[]')::text from {schema}.jobs as j), "
        "(select coalesce(json_agg(s), '[]')::text from {schema}.steps as s), "
        "(select coalesce(json_agg(d), '[]')::text from {schema}.webhook_deliveries as d)",
    )[0]  # fmt: skip
    listing = await hook_app.webhooks.endpoints()
    texts = [*dumped, caplog.text, json.dumps(listing.to_dict()), repr(rotated), repr(listing)]
    for secret in (endpoint.secret, rotated.secret):
        assert secret is not None
        key = secret.removeprefix("whsec_")
        assert all(key not in text for text in texts)
    assert listing.endpoints[0].secret is None


async def test_send_refusals_change_nothing(hook_app: App, receiver: Receiver, database_url: str) -> None:
    endpoint = await add(hook_app, receiver)

    async def code(*args: Any) -> str:
        with pytest.raises(WebhookError) as caught:
            await hook_app.webhooks.send(*args)
        return caught.value.code

    assert await code(endpoint.id, "order.refunded", {}) == "WEBHOOK_EVENT_NOT_SUBSCRIBED"
    assert await code("00000000-0000-0000-0000-000000000000", "order.paid", {}) == "WEBHOOK_ENDPOINT_NOT_FOUND"
    assert await code("nope", "order.paid", {}) == "WEBHOOK_ENDPOINT_NOT_FOUND"
    assert await code(endpoint.id, "", {}) == "CONFIG_INVALID"
    assert rows(hook_app, database_url, "select count(*) from {schema}.jobs") == [(0,)]
    with pytest.raises(WebhookError) as caught:
        await hook_app.webhooks.add_endpoint("https://example.com/", tenant="o1", events=[])
    assert caught.value.code == "CONFIG_INVALID"


async def test_send_joins_the_callers_transaction(hook_app: App, receiver: Receiver, database_url: str) -> None:
    endpoint = await add(hook_app, receiver)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await hook_app.webhooks.send(endpoint.id, "order.paid", {"kept": False}, conn=conn)
        await conn.rollback()
        await hook_app.webhooks.send(endpoint.id, "order.paid", {"kept": True}, conn=conn)
        await conn.commit()
    await drain(hook_app)
    assert [json.loads(r.body)["data"] for r in receiver.received] == [{"kept": True}]


async def test_an_app_without_the_policy_refuses_to_send(database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)
    await app.migrate()
    try:
        with pytest.raises(WebhookError) as caught:
            await app.webhooks.add_endpoint("https://example.com/", tenant="o1")
        assert caught.value.code == "WEBHOOKS_NOT_ENABLED"
        assert (await app.webhooks.endpoints()).endpoints == []  # reading works on any app
        assert "workhorse.webhooks.deliver" not in app.jobs
    finally:
        await app.close()


def test_a_policy_whose_timeout_does_not_fit_the_drain_is_refused(database_url: str) -> None:
    app = App(database_url, webhooks=WebhookPolicy(timeout="30s"))
    with pytest.raises(ConfigurationError) as caught:
        app.worker()
    assert caught.value.code == "WEBHOOK_TIMEOUT_OVER_DRAIN"
    assert app.worker(drain_timeout="40s").queues == ["webhooks"]  # 30 s + 2 s to record fits in 40 s
    with pytest.raises(ConfigurationError, match="webhooks expected"):
        App(database_url, webhooks={"allow_private": True})  # type: ignore[arg-type]


async def test_a_cancelled_attempt_writes_no_ledger_row(hook_app: App, receiver: Receiver, database_url: str) -> None:
    endpoint = await add(hook_app, receiver)
    receiver.default = Reply(200, delay=2)
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    worker = hook_app.worker(queues=["webhooks"], handle_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(600):
            if receiver.received:
                break
            await asyncio.sleep(0.05)
        assert receiver.received, "the POST never reached the receiver"
        await hook_app.cancel(ref.id)  # an operator's cancel while the POST is on the wire
        for _ in range(600):
            if worker.stats.lease_lost or (worker.stats.claimed and not worker._table.leased()):
                break
            await asyncio.sleep(0.05)
    finally:
        await worker.stop()
        await running
    assert (await hook_app.webhooks.deliveries(endpoint.id)).deliveries == []
    assert (await hook_app.get_job(ref.id)).state == "cancelled"  # type: ignore[union-attr]
    assert (await hook_app.webhooks.endpoint(endpoint.id)).consecutive_failures == 0


async def test_an_attempt_whose_run_is_not_ours_records_nothing(hook_app: App, receiver: Receiver) -> None:
    endpoint = await add(hook_app, receiver)
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    job = await hook_app.get_job(ref.id)
    assert job is not None
    # The job is not running under this worker (its lease went to another, say): the ledger's fence refuses.
    ctx = JobContext(
        id=ref.id, name=job.name, queue=job.queue, tenant=job.tenant, attempt=1, max_attempts=3,
        worker_id="w-somebody-else", logger=logging.getLogger("test"),
    )  # fmt: skip
    with pytest.raises(LeaseLostError):
        await attempt(hook_app, POLICY, ctx, job.payload)
    assert (await hook_app.webhooks.deliveries(endpoint.id)).deliveries == []


async def test_webhooks_are_postgres_only() -> None:
    app = App(driver="memory", webhooks=POLICY)
    assert "workhorse.webhooks.deliver" in app.jobs
    with pytest.raises(WebhookError) as caught:
        await app.webhooks.add_endpoint("http://127.0.0.1:9/", tenant="o1")
    assert caught.value.code == "POSTGRES_ONLY" and "pg_app" in caught.value.fix


async def test_a_url_httpx_cannot_send_is_a_recorded_failure_not_an_escape(receiver: Receiver) -> None:
    # Targets check_url now refuses (an endpoint row stored before it did): post() answers a failure
    # the ledger records, rather than raising past it.
    loopback = [ipaddress.ip_address("127.0.0.1")]
    idn = Target("http", "bücher.de", receiver.port, "/hooks")  # UnicodeEncodeError (the Host header)
    control = Target("http", "127.0.0.1", receiver.port, "/a\x01b")  # httpx.InvalidURL
    for target in (idn, control):
        answer = await post(target, loopback, {}, b"{}", 3)
        assert answer.status == "failed" and answer.response_code is None and answer.error
    assert receiver.received == []


async def test_an_endpoint_whose_url_is_now_refused_is_recorded_and_ends_the_job(
    hook_app: App, receiver: Receiver, database_url: str
) -> None:
    endpoint = await add(hook_app, receiver)
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    with psycopg.connect(database_url) as conn:  # a row stored before the URL was refused
        conn.execute(
            f"update {hook_app.schema}.webhook_endpoints set url = %s where id = %s",  # type: ignore[arg-type]
            (receiver.url + "/a\x01b", endpoint.id),
        )
    await drain(hook_app)
    assert receiver.received == []
    [d] = (await hook_app.webhooks.deliveries(endpoint.id)).deliveries
    assert d.status == "refused" and (d.error or "").startswith("WEBHOOK_URL_INVALID")
    assert (await hook_app.get_job(ref.id)).state == "dead"  # type: ignore[union-attr]
    assert (await hook_app.webhooks.endpoint(endpoint.id)).consecutive_failures == 1


async def test_a_retry_after_int_cannot_read_is_unstated_and_recorded(hook_app: App, receiver: Receiver) -> None:
    endpoint = await add(hook_app, receiver)
    receiver.script = [Reply(429, {"retry-after": "\xb2"}), Reply(200)]  # the latin-1 byte 0xb2: "²".isdigit()
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    await drain(hook_app)
    page = await hook_app.webhooks.deliveries(endpoint.id)
    assert [(d.attempt, d.status, d.response_code) for d in page.deliveries] == [
        (2, "delivered", 200), (1, "throttled", 429),
    ]  # fmt: skip
    assert "Retry-After" not in (page.deliveries[1].error or "")  # unstated: the job's backoff retried it
    assert (await hook_app.get_job(ref.id)).state == "done"  # type: ignore[union-attr]
    with pytest.raises(WebhookError) as caught:
        await hook_app.webhooks.deliveries(endpoint.id, after="\xb2")
    assert caught.value.code == "PAGE_CURSOR_INVALID"


async def test_the_excerpt_keeps_no_control_character_but_newline_and_tab(hook_app: App, receiver: Receiver) -> None:
    endpoint = await add(hook_app, receiver)
    hostile = "\x1b]52;c;aGk=\x07\x1b[8mhidden\r\n\tok\u009b\x7f\x00é"  # OSC 52 (clipboard), conceal, CSI as C1
    receiver.default = Reply(500, body=hostile.encode())
    await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    await drain(hook_app)
    excerpt = (await hook_app.webhooks.deliveries(endpoint.id)).deliveries[0].response_excerpt
    assert excerpt == "\ufffd]52;c;aGk=\ufffd\ufffd[8mhidden\ufffd\n\tok\ufffd\ufffd\ufffdé"


async def test_a_compressed_answer_is_never_inflated(receiver: Receiver) -> None:
    import gzip
    import tracemalloc

    bomb = gzip.compress(b"A" * 50_000_000, compresslevel=9)  # ~50 kB on the wire, 50 MB inflated
    receiver.default = Reply(200, {"content-encoding": "gzip"}, body=bomb)
    target = check_url(receiver.url, POLICY)
    tracemalloc.start()
    try:
        answer = await post(target, [ipaddress.ip_address("127.0.0.1")], {}, b"{}", 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status == "delivered" and answer.excerpt is not None
    assert "AAAA" not in answer.excerpt and len(answer.excerpt) <= 1024  # the raw bytes, bounded
    assert peak < 10_000_000, f"{peak} bytes allocated reading a {len(bomb)}-byte answer"
    assert receiver.received[0].headers["accept-encoding"] == "identity"


async def test_a_response_judge_cannot_read_is_a_recorded_failure(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workhorse.webhooks import wire

    def unreadable(*args: object) -> float:
        raise ValueError("a header nobody foresaw")

    monkeypatch.setattr(wire, "retry_after_seconds", unreadable)
    receiver.default = Reply(429, {"retry-after": "7"})
    answer = await post(check_url(receiver.url, POLICY), [ipaddress.ip_address("127.0.0.1")], {}, b"{}", 3)
    assert answer.status == "failed" and "a header nobody foresaw" in (answer.error or "")
