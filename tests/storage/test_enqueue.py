"""Enqueue: refs, keys, delays, batches, and the refusals that write nothing."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from workhorse import App, ConfigurationError, PayloadError


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="emails.send", queue="emails", tenant=lambda p: p["org"])
    async def send(ctx, payload):  # type: ignore[no-untyped-def]
        return None

    return send


@pytest.mark.parametrize(
    ("payload", "path", "what"),
    [
        ({"org": "o1", "price": math.nan}, "$.price", "NaN"),
        ({"org": "o1", "x": [1, math.inf]}, "$.x[1]", "NaN and Infinity"),
        ({"org": "o1", "name": "a\x00b"}, "$.name", "NUL"),
        ({"org": "o1", "when": datetime(2020, 1, 1)}, "$.when", "datetime is not JSON"),
        ({"org": "o1", "amount": Decimal("1.5")}, "$.amount", "Decimal is not JSON"),
        ({"org": "o1", "raw": b"xx"}, "$.raw", "bytes is not JSON"),
        ({"org": "o1", "ids": {1, 2}}, "$.ids", "set is not JSON"),
        ({"org": "o1", "m": {1: "a"}}, "$.m", "key must be a string"),
        ({"org": "o1", "odd key": object()}, '$["odd key"]', "object is not JSON"),
    ],
)
async def test_bad_payload_is_refused_with_its_path(app: App, payload: object, path: str, what: str) -> None:
    send = declare(app)
    with pytest.raises(PayloadError) as refused:
        await send.enqueue(payload)
    assert refused.value.code == "PAYLOAD_INVALID"
    assert path in refused.value.cause and what in refused.value.cause
    assert refused.value.fix
    assert (await app.list_jobs()).jobs == []


async def test_deep_nesting_is_refused(app: App) -> None:
    send = declare(app)
    deep: dict[str, object] = {"org": "o1"}
    node = deep
    for _ in range(100):
        child: dict[str, object] = {}
        node["c"] = child
        node = child
    with pytest.raises(PayloadError, match="deeper than"):
        await send.enqueue(deep)


async def test_oversized_payload_is_refused_and_nothing_written(database_url: str, app: App) -> None:
    small = App(database_url, schema=app.schema, max_payload_bytes=200)
    send = declare(small)
    with pytest.raises(PayloadError) as refused:
        await send.enqueue({"org": "o1", "blob": "x" * 300})
    assert refused.value.code == "PAYLOAD_TOO_LARGE"
    assert "200 bytes" in refused.value.cause
    assert (await app.list_jobs()).jobs == []
    ok = await send.enqueue({"org": "o1", "blob": "x" * 100})
    assert await app.get_job(ok.id) is not None
    await small.close()


async def test_one_bad_payload_in_a_batch_writes_none(app: App) -> None:
    send = declare(app)
    with pytest.raises(PayloadError):
        await send.enqueue_many([{"org": "o1"}, {"org": "o1", "x": math.nan}])
    assert (await app.list_jobs()).jobs == []


async def test_enqueue_option_refusals(app: App) -> None:
    send = declare(app)
    with pytest.raises(ConfigurationError, match="both delay= and run_at="):
        await send.enqueue({"org": "o1"}, delay=5, run_at=datetime.now(UTC))  # clock-ok: a test value
    with pytest.raises(ConfigurationError, match="timezone-aware"):
        await send.enqueue({"org": "o1"}, run_at=datetime(2030, 1, 1))
    with pytest.raises(ConfigurationError, match="non-negative duration"):
        await send.enqueue({"org": "o1"}, delay="soon")
    with pytest.raises(ConfigurationError, match="key of job"):
        await send.enqueue({"org": "o1"}, key="")
    with pytest.raises(ConfigurationError, match="priority"):
        await send.enqueue({"org": "o1"}, priority=10**9)
    with pytest.raises(ConfigurationError, match="tenant"):
        await send.enqueue({"org": 7})  # the tenant function answered a non-string
    with pytest.raises(ConfigurationError, match="tenant function raised KeyError"):
        await send.enqueue({"no_org": True})
    with pytest.raises(ConfigurationError, match="one key per payload"):
        await send.enqueue_many([{"org": "o1"}], keys=["a", "b"])
    assert (await app.list_jobs()).jobs == []


async def test_enqueue_sync_from_sync_code(app: App) -> None:
    import asyncio

    send = declare(app)
    ref = await asyncio.to_thread(send.enqueue_sync, {"org": "o1"}, key="s1")
    again = await asyncio.to_thread(send.enqueue_sync, {"org": "o1"}, key="s1")
    assert again.id == ref.id and again.duplicate
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "ready"


async def test_a_large_plain_batch_lands_whole_and_due_now(app: App) -> None:
    """Big keyless batches stream in with COPY on Postgres: same rows, same clock, same wake."""
    send = declare(app)
    refs = await send.enqueue_many([{"org": "o1", "i": i} for i in range(150)])
    assert len({r.id for r in refs}) == 150 and not any(r.duplicate for r in refs)
    page = await app.list_jobs(limit=200)
    assert len(page.jobs) == 150
    assert {j.state for j in page.jobs} == {"ready"}
    first = await app.get_job(refs[0].id)
    assert first is not None and first.payload == {"org": "o1", "i": 0} and first.tenant == "o1"
    assert abs((first.run_at - first.created_at).total_seconds()) < 1


async def test_a_copied_batch_keeps_every_character(app: App) -> None:
    send = declare(app)
    odd = {"org": "tab\there\\n", "text": 'back\\slash, tab\t, newline\n, cr\r, quote", é ☃', "n": [1.5, None]}
    refs = await send.enqueue_many([odd] * 100)
    job = await app.get_job(refs[-1].id)
    assert job is not None and job.payload == odd and job.tenant == odd["org"]


async def test_a_bad_payload_deep_in_a_big_batch_writes_nothing(app: App) -> None:
    """Postgres streams a big keyless batch while later rows are still being encoded, so row 900's
    refusal arrives after 800 rows went over the wire: the COPY is aborted and rolled back."""
    send = declare(app)
    payloads: list[object] = [{"org": "o1", "i": i} for i in range(1000)]
    payloads[900] = {"org": "o1", "when": datetime(2030, 1, 1, tzinfo=UTC)}
    with pytest.raises(PayloadError) as refused:
        await send.enqueue_many(payloads)
    assert refused.value.code == "PAYLOAD_INVALID" and "$.when" in refused.value.cause
    assert (await app.list_jobs()).jobs == []
    refs = await send.enqueue_many(payloads[:900])  # the connection is fine afterwards
    assert len(refs) == 900
