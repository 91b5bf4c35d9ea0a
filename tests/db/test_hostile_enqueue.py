"""Hostile values at enqueue (issue 27): what PostgreSQL cannot store, or would hand back changed,
is refused with a code before anything is written; what it keeps reads back equal, of the same type."""

from __future__ import annotations

import json
import math
from typing import Any

import psycopg
import pytest

from workhorse import App, ConfigurationError, JobContext, PayloadError

SURROGATE = json.loads('"from-api\\ud800"')  # what a third party's JSON really yields


def _declare(app: App) -> Any:
    @app.job(name="hostile.enqueue", tenant=lambda p: p.get("tenant", "acme"))
    async def job(ctx: JobContext, payload: Any) -> None:
        return None

    return job


@pytest.mark.parametrize("where", ["key", "queue", "tenant"])
async def test_a_lone_surrogate_in_a_name_is_refused_with_a_code(app: App, where: str) -> None:
    job = _declare(app)
    options: dict[str, Any] = {"key": SURROGATE} if where == "key" else {"queue": SURROGATE} if where == "queue" else {}
    payload = {"tenant": SURROGATE} if where == "tenant" else {}
    with pytest.raises(ConfigurationError) as refused:
        await job.enqueue(payload, **options)
    assert refused.value.code == "CONFIG_INVALID"
    assert f"{where}" in refused.value.cause and "lone surrogate" in refused.value.cause
    assert (await app.admin.list()).jobs == []


async def test_hostile_payload_values_are_refused_before_anything_is_written(app: App) -> None:
    job = _declare(app)
    for payload, code in (
        ({"from_api": SURROGATE}, "PAYLOAD_INVALID"),
        ({"n": 10**5000}, "PAYLOAD_NUMBER_CHANGED"),
        ({"x": 1e300}, "PAYLOAD_NUMBER_CHANGED"),
        ({"x": -0.0}, "PAYLOAD_NUMBER_CHANGED"),
    ):
        with pytest.raises(PayloadError) as refused:
            await job.enqueue(payload)
        assert refused.value.code == code, payload
    assert (await app.admin.list()).jobs == []


KEPT = [0.1, 0.30000000000000004, 9999999999999998.0, -2.5e-7, 5e-324, 1e-300, 0.0, -7, 10**4299, -(2**63)]


async def test_numbers_jsonb_keeps_read_back_equal_and_of_the_same_type(app: App) -> None:
    job = _declare(app)
    ref = await job.enqueue({"numbers": KEPT})
    stored = await app.admin.get(ref.id)
    assert stored is not None
    back = stored.payload["numbers"]
    assert back == KEPT
    assert [type(v) for v in back] == [type(v) for v in KEPT]
    assert math.copysign(1.0, back[6]) == 1.0


def test_what_jsonb_does_to_the_numbers_refused(database_url: str) -> None:
    """Why they are refused: this is what PostgreSQL hands back for each (read as psycopg reads it)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute("select %s::jsonb", (json.dumps([1e300, 1.5e20, -0.0]),)).fetchone()
    assert row is not None
    big, wide, zero = row[0]
    assert isinstance(big, int) and big == 10**300 and big != 1e300
    assert isinstance(wide, int) and wide == 150_000_000_000_000_000_000
    assert math.copysign(1.0, zero) == 1.0


async def test_the_longest_delay_reads_back_in_every_tool(app: App) -> None:
    job = _declare(app)
    ref = await job.enqueue({}, delay="36525d")
    stored = await app.admin.get(ref.id)
    assert stored is not None and stored.run_at is not None and stored.run_at.year < 9999
    assert [j.id for j in (await app.admin.list()).jobs] == [ref.id]
    await app.admin.remove(ref.id)


async def test_admin_filters_postgres_cannot_store_are_refused_with_the_names_code(app: App) -> None:
    for options, code in (
        ({"queue": "a\x00"}, "QUEUE_NAME_INVALID"),
        ({"tenant": SURROGATE}, "TENANT_INVALID"),
        ({"name": "a\x00"}, "JOB_NAME_INVALID"),
        ({"name_part": SURROGATE}, "JOB_NAME_INVALID"),
        ({"error": "a\x00"}, "SEARCH_INVALID"),
        ({"payload": {"a": "\x00"}}, "SEARCH_INVALID"),
    ):
        with pytest.raises(ConfigurationError) as refused:
            await app.admin.list(**options)
        assert refused.value.code == code, options
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.cancel_many(state="ready", tenant="a\x00")
    assert refused.value.code == "TENANT_INVALID"
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.pause("emails\x00")
    assert refused.value.code == "QUEUE_NAME_INVALID"
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.pause("emails", reason="disk\x00full")
    assert refused.value.code == "PAUSE_REASON_INVALID"
    assert await app.admin.pauses() == []
