"""Stored events: what ``app.publish_event`` writes and ``ctx.step.wait_for_event`` waits for.

Design: docs/guides/steps.md
"""

from __future__ import annotations

from typing import Any

from workhorse.durations import Duration, bounded_seconds
from workhorse.errors import ConfigurationError, PayloadError
from workhorse.payload import encode
from workhorse.storable import flaw

MAX_NAME_LENGTH = 200
MAX_KEY_LENGTH = 200
DEFAULT_TTL: Duration = "7d"


def check_event_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH or flaw(name):
        raise ConfigurationError(
            code="EVENT_NAME_INVALID",
            cause=f"an event name must be a non-empty string of at most {MAX_NAME_LENGTH} characters PostgreSQL "
            f"can store (no NUL, no lone surrogate), got {name!r}",
            fix="app.publish_event('order.shipped', payload, key=order_id)",
        )
    return name


def check_event_key(key: Any) -> str | None:
    """A correlation key: None, or a non-empty string (an int is a common slip, refused, not coerced)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH or flaw(key):
        raise ConfigurationError(
            code="EVENT_KEY_INVALID",
            cause=f"an event key must be None or a non-empty string of at most {MAX_KEY_LENGTH} characters "
            "PostgreSQL can store (no NUL, no lone surrogate), "
            f"got {key!r}",
            fix="pass the correlation key as text: key=str(order_id)",
        )
    return key


def prepare_event(
    name: Any, payload: Any, key: Any, ttl: Duration, *, max_bytes: int
) -> tuple[str, str | None, str, float]:
    """Validate one publish before anything is written: (name, key, payload JSON text, ttl seconds)."""
    name = check_event_name(name)
    key = check_event_key(key)
    try:
        text = encode(payload, max_bytes=max_bytes, what=f"the payload of event {name!r}")
    except PayloadError as error:
        raise PayloadError(
            code=error.code, cause=f"the payload of event {name!r} cannot be stored: {error.cause}", fix=error.fix
        ) from None
    seconds = bounded_seconds(
        ttl,
        what=f"ttl of event {name!r}",
        code="EVENT_TTL_TOO_LONG",
        fix="app.publish_event(name, payload, ttl='30d')   # at most 36525 days",
        allow_zero=False,
    )
    return name, key, text, seconds
