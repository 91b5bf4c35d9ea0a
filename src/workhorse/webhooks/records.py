"""The records the webhooks API answers: an endpoint (its secret only when just made), a ledger row,
and their pages. ``to_dict`` is what ``--json`` prints; it never carries a secret."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Endpoint:
    """One receiver. ``secret`` is set only on what ``add_endpoint`` and ``rotate_secret`` answer
    (keep it: nothing prints it again); every read leaves it None. ``events`` None: every event."""

    id: str
    tenant: str | None
    url: str
    events: list[str] | None
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    consecutive_failures: int
    disable_after: int | None  # None: the app's WebhookPolicy.disable_after
    rotating: bool  # a previous secret still signs beside the current one
    previous_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_row(cls, row: dict[str, Any], secret: str | None = None) -> Endpoint:
        return cls(
            id=row["id"],
            tenant=row["tenant"],
            url=row["url"],
            events=None if row["events"] is None else list(row["events"]),
            enabled=row["enabled"],
            disabled_reason=row["disabled_reason"],
            disabled_at=row["disabled_at"],
            consecutive_failures=row["consecutive_failures"],
            disable_after=row["disable_after"],
            rotating=bool(row["rotating"]),
            previous_expires_at=row["previous_expires_at"] if row["rotating"] else None,
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            secret=secret,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "url": self.url,
            "events": self.events,
            "enabled": self.enabled,
            "disabled_reason": self.disabled_reason,
            "disabled_at": _iso(self.disabled_at),
            "consecutive_failures": self.consecutive_failures,
            "disable_after": self.disable_after,
            "rotating": self.rotating,
            "previous_expires_at": _iso(self.previous_expires_at),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


@dataclass(frozen=True)
class Delivery:
    """One recorded attempt. ``status``: delivered, failed, throttled (429/503), gone (410),
    refused (the URL or its address was refused before any socket), skipped (the endpoint was
    disabled). ``id`` orders the ledger; pass it as ``after`` to page."""

    id: int
    endpoint_id: str
    job_id: str
    message_id: str
    event: str
    attempt: int
    status: str
    response_code: int | None
    latency_ms: float | None
    response_excerpt: str | None
    error: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Delivery:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "endpoint_id": self.endpoint_id,
            "job_id": self.job_id,
            "message_id": self.message_id,
            "event": self.event,
            "attempt": self.attempt,
            "status": self.status,
            "response_code": self.response_code,
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 3),
            "response_excerpt": self.response_excerpt,
            "error": self.error,
            "created_at": _iso(self.created_at),
        }


@dataclass(frozen=True)
class DeliveryPage:
    """One page of an endpoint's ledger, newest first. ``next``: pass as ``after`` for older rows."""

    deliveries: list[Delivery]
    next: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"deliveries": [d.to_dict() for d in self.deliveries], "next": self.next}


@dataclass(frozen=True)
class EndpointPage:
    """One page of endpoints by id. ``next``: pass as ``after`` for the following page."""

    endpoints: list[Endpoint]
    next: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"endpoints": [e.to_dict() for e in self.endpoints], "next": self.next}
