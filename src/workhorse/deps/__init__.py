"""Job dependencies: ``enqueue(payload, after=[...], when=...)`` checked here, ``ctx.dependencies``'s
``Dependency``; the statements are in ``workhorse.deps.queries``, the release in migration 022.

Design: docs/guides/dependencies.md
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from workhorse.errors import ConfigurationError, WorkhorseError
from workhorse.types import JobRef

WHENS = ("done", "finished")
UNKNOWN = "DEPENDENCY_UNKNOWN"
# The code in the last_error of a when='done' dependent cancelled for a dependency (migration 022).
FAILED = "DEPENDENCY_FAILED"


@dataclass(frozen=True)
class Dependency:
    """A job this one waits on, as the claim read it: ``state`` is final (``done`` unless the job
    was enqueued with ``when="finished"``), or None when retention already purged the row."""

    id: str
    name: str | None
    state: str | None
    result: Any
    last_error: dict[str, Any] | None


def dependencies_of(rows: list[dict[str, Any]] | None) -> list[Dependency]:
    """``ctx.dependencies`` from what the claim answered (``Claimed.dependencies``)."""
    if not rows:
        return []
    return [Dependency(r["id"], r.get("name"), r.get("state"), r.get("result"), r.get("last_error")) for r in rows]


def checked_after(
    after: Iterable[JobRef | str] | None, when: str, *, job: str, keyed: bool
) -> tuple[tuple[str, ...], str]:
    """The ids of ``after=`` in order (canonical uuids) and ``when``, refused before anything is
    written: a bad ``when`` (CONFIG_INVALID naming both values), something not a ref or an id, a
    malformed id (DEPENDENCY_UNKNOWN), or an idempotency key alongside (CONFIG_INVALID)."""
    if when not in WHENS:
        raise ConfigurationError(
            cause=f"job {job!r}: when= expected 'done' or 'finished', got {when!r}",
            fix="enqueue(payload, after=[a, b], when='done')   # or when='finished': run whatever they ended",
        )
    if after is None:
        return (), when
    if isinstance(after, str | bytes | JobRef) or not isinstance(after, Iterable):
        raise ConfigurationError(
            cause=f"job {job!r}: after= expected a list of job refs or ids, got {type(after).__name__}",
            fix="enqueue(payload, after=[ref])   # a list, even of one",
        )
    ids: list[str] = []
    for item in after:
        text = item.id if isinstance(item, JobRef) else item
        if not isinstance(text, str):
            raise ConfigurationError(
                cause=f"job {job!r}: after= holds a {type(item).__name__}; it takes job refs or ids",
                fix="enqueue(payload, after=[await other.enqueue(...)])   # the ref enqueue answered",
            )
        try:
            ids.append(str(uuid.UUID(text)))
        except ValueError:
            raise unknown([text]) from None
    if ids and keyed:
        raise ConfigurationError(
            cause=f"job {job!r}: key= and after= were both given; an idempotent enqueue answering an existing "
            "job would leave the dependencies given unsaid",
            fix="drop key= for a job with dependencies (or enqueue it once, from the code that owns the graph)",
        )
    return tuple(ids), when


def unknown(ids: Sequence[str]) -> WorkhorseError:
    """``DEPENDENCY_UNKNOWN``: ``ids`` name no job this transaction can see; nothing was inserted."""
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return WorkhorseError(
        code=UNKNOWN,
        cause=f"after= names no job with id {shown} (never enqueued, removed, purged by retention, or not yet "
        "committed by another transaction); nothing was enqueued",
        fix="pass refs of jobs enqueued before (in this transaction with conn=, or committed), e.g. "
        "after=[await fetch.enqueue(...)]",
    )
