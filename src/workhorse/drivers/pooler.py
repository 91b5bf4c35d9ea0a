"""Running behind a connection pooler: ``WORKHORSE_POOLER``, ``WORKHORSE_LISTEN_URL``, ``WORKHORSE_POOL_SIZE``.

Under ``WORKHORSE_POOLER=transaction`` nothing outlives a transaction on a pooled connection: no
startup options, no prepared statements, no LISTEN (that goes over the listen URL, else workers poll).
Design: docs/guides/pgbouncer.md.
"""

from __future__ import annotations

import os
from typing import Any

from workhorse.errors import ConfigurationError

ENV_POOLER = "WORKHORSE_POOLER"
ENV_LISTEN_URL = "WORKHORSE_LISTEN_URL"
ENV_POOL_SIZE = "WORKHORSE_POOL_SIZE"
TIMEZONE_UTC = "set time zone 'UTC'"
DEFAULT_POOL_SIZE = 10
MODES = ("none", "transaction")


def pooled() -> bool:
    """True when ``WORKHORSE_POOLER=transaction``; refused (``POOLER_INVALID``) for an unknown mode."""
    raw = os.environ.get(ENV_POOLER, "").strip().lower()
    if raw in ("", "none"):
        return False
    if raw == "transaction":
        return True
    raise ConfigurationError(
        code="POOLER_INVALID",
        cause=f"{ENV_POOLER}={raw!r} is not a pooler mode workhorse knows ({', '.join(MODES)})",
        fix=f"{ENV_POOLER}=transaction behind PgBouncer's pool_mode=transaction; unset it for a direct "
        "connection or a session-mode pooler",
    )


def connect_options(url_options: dict[str, Any]) -> dict[str, Any]:
    """``url_options`` (psycopg connect keywords) as a pooled connection needs them: no startup
    ``options``, no prepared statements. Unchanged when not pooled."""
    if not pooled():
        return url_options
    kept = {k: v for k, v in url_options.items() if k != "options"}
    kept["prepare_threshold"] = None
    return kept


def listen_url(url: str) -> str | None:
    """Where a ``LISTEN`` session connects: ``WORKHORSE_LISTEN_URL`` when set, else ``url`` when
    not pooled; None behind a transaction pooler without one (wake-ups are then polled)."""
    direct = os.environ.get(ENV_LISTEN_URL, "").strip()
    if direct:
        return direct
    return None if pooled() else url


def pool_size() -> int:
    """``WORKHORSE_POOL_SIZE`` (1 to 1000), else 10; anything else is refused (``POOL_SIZE_INVALID``)."""
    raw = os.environ.get(ENV_POOL_SIZE, "").strip()
    if not raw:
        return DEFAULT_POOL_SIZE
    if raw.isdigit() and 1 <= int(raw) <= 1000:
        return int(raw)
    raise ConfigurationError(
        code="POOL_SIZE_INVALID",
        cause=f"{ENV_POOL_SIZE}={raw!r} is not a whole number of connections from 1 to 1000",
        fix=f"{ENV_POOL_SIZE}=4 (at most 4 connections in the app's pool per process); unset for {DEFAULT_POOL_SIZE}",
    )
