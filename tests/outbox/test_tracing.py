"""OpenTelemetry: a traceparent stamped at enqueue and at staging from the current span, and each
attempt's span continuing that trace (the SDK's in-memory exporter), on both drivers. Without
OpenTelemetry imported, nothing is stamped and nothing of it is imported."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from workhorse import App, JobContext, Outbox
from workhorse.outbox.relay import Relay
from workhorse.tracing import current_traceparent, parent_context

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows one) and its exporter, emptied."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def traceparent_of(span: Any) -> str:
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def declare(app: App, seen: list[str | None]) -> Any:
    tracer = trace.get_tracer("tests")

    @app.job(name="traced.job", tenant="none")
    async def traced(ctx: JobContext, payload: Any) -> None:
        seen.append(current_traceparent())  # the attempt's span is current in the body
        with tracer.start_as_current_span("inside the body"):
            pass

    return traced


async def test_enqueue_stamps_the_current_span_and_the_attempt_continues_it(
    app: App, spans: InMemorySpanExporter
) -> None:
    seen: list[str | None] = []
    traced = declare(app, seen)
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("web request") as request:
        ref = await traced.enqueue({"n": 1})
        batch = await traced.enqueue_many([{"n": 2}, {"n": 3}])  # the keyless fast path stamps too
    plain = await traced.enqueue({"n": 4})  # no span current: nothing stamped
    stamped = traceparent_of(request)
    for job_id in (ref.id, batch[0].id, batch[1].id):
        job = await app.get_job(job_id)
        assert job is not None and job.traceparent == stamped
    untraced = await app.get_job(plain.id)
    assert untraced is not None and untraced.traceparent is None

    await app.worker(concurrency=1).run(burst=True)
    finished = spans.get_finished_spans()
    attempts = [s for s in finished if s.name == "workhorse.job traced.job"]
    assert len(attempts) == 4
    by_job = {s.attributes["workhorse.job.id"]: s for s in attempts}  # type: ignore[index]
    first = by_job[ref.id]
    assert first.context.trace_id == request.get_span_context().trace_id
    assert first.parent is not None and first.parent.span_id == request.get_span_context().span_id
    assert first.kind == trace.SpanKind.CONSUMER and first.attributes["workhorse.attempt"] == 1  # type: ignore[index]
    assert by_job[plain.id].parent is None  # a job enqueued with no span starts a trace of its own
    inner = [s for s in finished if s.name == "inside the body"]
    assert {s.parent.span_id for s in inner if s.parent} == {s.context.span_id for s in attempts}
    assert traceparent_of(first) in seen


async def test_a_def_body_on_its_pool_thread_runs_inside_the_attempts_span(
    app: App, spans: InMemorySpanExporter
) -> None:
    seen: list[str | None] = []

    @app.job(name="traced.sync", tenant="none")
    def traced_sync(ctx: JobContext, payload: Any) -> None:
        seen.append(current_traceparent())

    with trace.get_tracer("tests").start_as_current_span("web request"):
        await traced_sync.enqueue({})
    await app.worker(concurrency=1).run(burst=True)
    (attempt,) = [s for s in spans.get_finished_spans() if s.name == "workhorse.job traced.sync"]
    assert seen == [traceparent_of(attempt)]


async def test_staging_stamps_the_trace_and_the_relay_carries_it(
    pg_app: App, dedicated_database: str, spans: InMemorySpanExporter
) -> None:
    traced = declare(pg_app, [])
    outbox = Outbox(pg_app)
    async with await psycopg.AsyncConnection.connect(dedicated_database) as conn:
        await outbox.migrate(conn)
        with trace.get_tracer("tests").start_as_current_span("checkout") as checkout:
            ref = await outbox.stage(conn, traced, {"n": 1})
        await conn.commit()
    await Relay(pg_app, [dedicated_database], handle_signals=False).run(burst=True)
    job = await pg_app.get_job(ref.id)
    assert job is not None and job.traceparent == traceparent_of(checkout)
    await pg_app.worker(concurrency=1).run(burst=True)
    (attempt,) = [s for s in spans.get_finished_spans() if s.name == "workhorse.job traced.job"]
    assert attempt.parent is not None and attempt.parent.span_id == checkout.get_span_context().span_id


def test_a_malformed_or_empty_traceparent_gives_no_parent() -> None:
    assert parent_context(None) is None
    assert parent_context("garbage") is None
    assert parent_context("00-" + "0" * 32 + "-" + "0" * 16 + "-01") is None  # all-zero ids are invalid
    assert parent_context("00-" + "a" * 32 + "-" + "b" * 16 + "-01") is not None


def test_without_opentelemetry_imported_nothing_is_imported_or_stamped() -> None:
    code = (
        "import sys, workhorse, workhorse.cli, workhorse.outbox.relay, workhorse.worker\n"
        "from workhorse.tracing import current_traceparent, attempt_span\n"
        "with attempt_span('n', 'id', 'q', 1, '00-' + 'a' * 32 + '-' + 'b' * 16 + '-01'):\n"
        "    assert current_traceparent() is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
