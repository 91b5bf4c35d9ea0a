"""OpenTelemetry, where it is installed: the ``traceparent`` stamped on a job at enqueue (and at
staging, ``workhorse.outbox``), and the span each attempt runs in, continuing that trace.

Design: docs/guides/operating.md
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any

_TRACE = "opentelemetry.trace"
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
TRACER_NAME = "workhorse"


def current_traceparent() -> str | None:
    """The current span's context as a traceparent, or None (no OpenTelemetry, no valid span)."""
    trace = sys.modules.get(_TRACE)
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parent_context(traceparent: str | None) -> Any:
    """An OpenTelemetry context whose current span is the remote parent ``traceparent`` names,
    or None (no OpenTelemetry imported, nothing stored, or not a well-formed traceparent)."""
    trace = sys.modules.get(_TRACE)
    if trace is None or traceparent is None:
        return None
    match = _TRACEPARENT.match(traceparent)
    if match is None:
        return None
    trace_id, span_id, flags = (int(part, 16) for part in match.groups())
    if not trace_id or not span_id:
        return None
    parent = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


@contextlib.contextmanager
def attempt_span(name: str, job_id: str, queue: str, attempt: int, traceparent: str | None) -> Iterator[None]:
    """One span around an attempt's body, named ``workhorse.job <name>``, a child of the trace
    stamped on the job (a new trace when none was). Nothing at all without OpenTelemetry imported."""
    trace = sys.modules.get(_TRACE)
    if trace is None:
        yield
        return
    tracer = trace.get_tracer(TRACER_NAME)
    attributes = {"workhorse.job.id": job_id, "workhorse.job.name": name, "workhorse.queue": queue,
                  "workhorse.attempt": attempt}  # fmt: skip
    with tracer.start_as_current_span(
        f"workhorse.job {name}", context=parent_context(traceparent), kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    ):  # fmt: skip
        yield
