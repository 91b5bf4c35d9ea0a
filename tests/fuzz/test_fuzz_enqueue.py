"""Fuzz every place a job's data enters at enqueue (issue 27): payload, key, tenant, queue, delay
and run_at, one at a time and in a batch, on PostgreSQL and on the memory driver. Each case ends
in a refusal with a code (never a raw Python error, never DATABASE_ERROR), or in a job that reads
back exactly as it was sent, at a time every tool can read; and both drivers agree which."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fuzzkit import FUZZ, Loop, declare_echo, durations, instants, names, payloads, refusal, same
from hypothesis import event, given
from hypothesis import strategies as st

from workhorse import App
from workhorse.durations import LONGEST

whens = st.one_of(
    st.none(),
    st.tuples(st.just("delay"), durations),
    st.tuples(st.just("run_at"), instants),
)


@pytest.fixture(scope="module")
def memory_app() -> App:
    return App(driver="memory")


async def _enqueue(app: App, payload: Any, options: dict[str, Any], many: bool) -> tuple[str | None, str | None]:
    """(the job id, None) when the enqueue was taken, (None, its refusal's code) when refused."""
    job = declare_echo(app)
    try:
        if many:
            keys = None if options.get("key") is None else [options["key"]]
            rest = {k: v for k, v in options.items() if k != "key"}
            return (await job.enqueue_many([payload], keys=keys, **rest))[0].id, None
        return (await job.enqueue(payload, **options)).id, None
    except Exception as error:
        return None, refusal(error).code


def _check(
    fuzz_app: App, memory_app: App, loop: Loop, sent: dict[str, Any], options: dict[str, Any], many: bool
) -> None:
    """Enqueue on both drivers: the same refusal, or a job that reads back as sent."""
    job_id, code = loop.run(_enqueue(fuzz_app, sent, options, many))
    memory_id, memory_code = loop.run(_enqueue(memory_app, sent, options, many))
    assert code == memory_code, f"postgres {code}, memory {memory_code}"
    event(code or "stored")
    if job_id is None:
        return
    try:
        stored = loop.run(fuzz_app.admin.get(job_id))
        assert stored is not None
        assert same(sent, stored.payload), (sent, stored.payload)
        assert (stored.tenant, stored.key) == (sent["t"], options.get("key"))
        assert stored.queue == (options.get("queue") or declare_echo(fuzz_app).queue)
        assert stored.run_at is not None and stored.run_at <= datetime.now(UTC) + LONGEST + timedelta(days=1)
        listed = loop.run(fuzz_app.admin.list(tenant=sent["t"], queue=stored.queue, limit=5))
        assert job_id in [j.id for j in listed.jobs]  # read back by the operator's own filters
    finally:
        loop.run(fuzz_app.admin.remove(job_id))
        if memory_id is not None:
            loop.run(memory_app.admin.remove(memory_id))


@FUZZ
@given(payload=payloads, many=st.booleans())
def test_a_payload_is_refused_with_a_code_or_reads_back_as_sent(
    fuzz_app: App, memory_app: App, loop: Loop, payload: Any, many: bool
) -> None:
    _check(fuzz_app, memory_app, loop, {"t": "acme", "p": payload}, {}, many)


@FUZZ
@given(tenant=st.one_of(names, st.integers()), key=st.one_of(st.none(), names), queue=st.one_of(st.none(), names))
def test_a_tenant_key_or_queue_is_refused_with_a_code_or_reads_back_as_sent(
    fuzz_app: App, memory_app: App, loop: Loop, tenant: Any, key: Any, queue: Any
) -> None:
    _check(fuzz_app, memory_app, loop, {"t": tenant, "p": None}, {"key": key, "queue": queue}, many=False)


@FUZZ
@given(when=whens, many=st.booleans())
def test_a_delay_or_run_at_is_refused_with_a_code_or_reads_back_readable(
    fuzz_app: App, memory_app: App, loop: Loop, when: Any, many: bool
) -> None:
    options = {} if when is None else {when[0]: when[1]}
    _check(fuzz_app, memory_app, loop, {"t": "acme", "p": 1}, options, many)


@FUZZ
@given(
    payload=payloads,
    tenant=st.one_of(names, st.integers()),
    key=st.one_of(st.none(), names),
    queue=st.one_of(st.none(), names),
    when=whens,
    many=st.booleans(),
)
def test_everything_at_once(
    fuzz_app: App, memory_app: App, loop: Loop, payload: Any, tenant: Any, key: Any, queue: Any, when: Any, many: bool
) -> None:
    options: dict[str, Any] = {"key": key, "queue": queue}
    if when is not None:
        options[when[0]] = when[1]
    _check(fuzz_app, memory_app, loop, {"t": tenant, "p": payload}, options, many)
