"""``app.webhooks``: endpoints (add, rotate, enable, disable, read) and ``send``, one delivery job.

Adding, rotating and sending need ``App(webhooks=WebhookPolicy(...))`` (``WEBHOOKS_NOT_ENABLED``
otherwise: without the policy no worker serves the deliveries). Reading and operating on
endpoints (what the CLI does) work on any app on the same database.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import workhorse.webhooks.queries as sql
from workhorse.durations import Duration, to_seconds
from workhorse.payload import encode
from workhorse.types import JobRef
from workhorse.webhooks import store
from workhorse.webhooks.errors import WebhookError, endpoint_not_found
from workhorse.webhooks.guard import check_url
from workhorse.webhooks.policy import DELIVERY_JOB, WebhookPolicy, check_disable_after
from workhorse.webhooks.ports import WebhookApp
from workhorse.webhooks.records import Delivery, DeliveryPage, Endpoint, EndpointPage
from workhorse.webhooks.signing import new_secret

MAX_NAME = 200
MAX_PAGE = 200
DEFAULT_GRACE = "24h"


class Webhooks:
    """The webhooks of one app. ``add_endpoint`` and ``rotate_secret`` answer the secret; nothing
    else ever does."""

    def __init__(self, app: WebhookApp, policy: WebhookPolicy | None) -> None:
        self._app = app
        self.policy = policy

    def _policy(self, what: str) -> WebhookPolicy:
        if self.policy is None:
            raise WebhookError(
                code="WEBHOOKS_NOT_ENABLED",
                cause=f"{what} needs the app's webhook policy, and this App was built without webhooks=, so no "
                "worker of it would serve the deliveries",
                fix="App(webhooks=WebhookPolicy())   # from workhorse.webhooks import WebhookPolicy",
            )
        return self.policy

    # -- endpoints ------------------------------------------------------------------------------

    async def add_endpoint(
        self,
        url: str,
        *,
        tenant: str,
        events: list[str] | None = None,
        disable_after: int | None = None,
    ) -> Endpoint:
        """A new endpoint with a fresh ``whsec_`` secret (on the answer only). ``events`` None
        accepts every event; ``disable_after`` overrides the policy's for this endpoint."""
        policy = self._policy("add_endpoint")
        check_url(url, policy)
        tenant = _name(tenant, "tenant", "add_endpoint(url, tenant='o1')")
        if events is not None:
            if isinstance(events, str) or not isinstance(events, list | tuple) or not events:
                raise WebhookError(
                    code="CONFIG_INVALID",
                    cause=f"events expected a non-empty list of event names, or None for every event, got {events!r}",
                    fix="add_endpoint(url, tenant=..., events=['order.paid'])",
                )
            events = sorted({_name(e, "event", "events=['order.paid']") for e in events})
        if disable_after is not None:
            check_disable_after(disable_after, "disable_after")
        secret = new_secret()
        params = {
            "id": str(uuid.uuid4()),
            "tenant": tenant,
            "url": url,
            "events": events,
            "secret": secret,
            "disable_after": disable_after,
        }
        row = (await store.fetch(self._app, sql.ENDPOINT_INSERT, params))[0]
        return Endpoint.from_row(row, secret=secret)

    async def rotate_secret(self, endpoint_id: str, *, grace: Duration = DEFAULT_GRACE) -> Endpoint:
        """A new secret for the endpoint (on the answer only). For ``grace`` (24 h) deliveries are
        signed with the new secret AND the old one, so the receiver can switch at its own pace."""
        self._policy("rotate_secret")
        seconds = to_seconds(grace, what="grace")
        secret = new_secret()
        rows = await store.fetch(
            self._app, sql.ENDPOINT_ROTATE, {"id": _id(endpoint_id), "secret": secret, "grace": seconds}
        )
        if not rows:
            raise endpoint_not_found(endpoint_id)
        return Endpoint.from_row(rows[0], secret=secret)

    async def endpoint(self, endpoint_id: str) -> Endpoint:
        rows = await store.fetch(self._app, sql.ENDPOINT_GET, {"id": _id(endpoint_id)})
        if not rows:
            raise endpoint_not_found(endpoint_id)
        return Endpoint.from_row(rows[0])

    async def endpoints(self, *, tenant: str | None = None, limit: int = 100, after: str | None = None) -> EndpointPage:
        """One page of endpoints, by id; follow ``next`` with ``after``."""
        limit = _limit(limit)
        params = {"tenant": tenant, "after": None if after is None else _id(after, what="after"), "limit": limit + 1}
        rows = await store.fetch(self._app, sql.ENDPOINT_LIST, params)
        found = [Endpoint.from_row(r) for r in rows[:limit]]
        return EndpointPage(found, found[-1].id if len(rows) > limit else None)

    async def enable(self, endpoint_id: str) -> Endpoint:
        """Re-enable an endpoint (its failure count starts again at 0). Never done automatically."""
        rows = await store.fetch(self._app, sql.ENDPOINT_ENABLE, {"id": _id(endpoint_id)})
        if not rows:
            raise endpoint_not_found(endpoint_id)
        return Endpoint.from_row(rows[0])

    async def disable(self, endpoint_id: str, *, reason: str = "disabled by an operator") -> Endpoint:
        """Disable an endpoint: every delivery checks before its socket, and sends nothing."""
        rows = await store.fetch(self._app, sql.ENDPOINT_DISABLE, {"id": _id(endpoint_id), "reason": str(reason)})
        if not rows:
            raise endpoint_not_found(endpoint_id)
        return Endpoint.from_row(rows[0])

    async def deliveries(self, endpoint_id: str, *, limit: int = 50, after: str | int | None = None) -> DeliveryPage:
        """One page of the endpoint's ledger, newest first; follow ``next`` with ``after``."""
        endpoint = await self.endpoint(endpoint_id)
        limit = _limit(limit)
        cursor: int | None = None
        if after is not None:
            text = str(after)
            if not (text.isascii() and text.isdigit()) or len(text) > 18:  # "²".isdigit() too
                raise WebhookError(
                    code="PAGE_CURSOR_INVALID",
                    cause=f"after {text[:40]!r} is not a ledger cursor (a page's `next`, a whole number)",
                    fix=f"workhorse webhooks deliveries {endpoint.id} --json   # and copy its next",
                )
            cursor = int(text)
        rows = await store.fetch(
            self._app, sql.DELIVERIES_PAGE, {"endpoint_id": endpoint.id, "after": cursor, "limit": limit + 1}
        )
        found = [Delivery.from_row(r) for r in rows[:limit]]
        return DeliveryPage(found, str(found[-1].id) if len(rows) > limit else None)

    # -- sending --------------------------------------------------------------------------------

    async def send(
        self, endpoint_id: str, event: str, payload: Any, conn: Any = None, *, key: str | None = None
    ) -> JobRef:
        """Enqueue ONE delivery of ``event`` to the endpoint, as a job (inside the caller's
        transaction with ``conn=``, like ``enqueue(conn=)``). Refused for an unknown or disabled
        endpoint and for an event it does not take. The body is ``{"type", "timestamp", "data"}``,
        fixed now: every attempt sends the same bytes under the same ``webhook-id``."""
        self._policy("send")
        event = _name(event, "event", "app.webhooks.send(endpoint.id, 'order.paid', {...})")
        data = json.loads(encode(payload, max_bytes=self._app.max_payload_bytes, what="webhook payload"))
        endpoint = await self.endpoint(endpoint_id)
        if not endpoint.enabled:
            raise WebhookError(
                code="WEBHOOK_ENDPOINT_DISABLED",
                cause=f"webhook endpoint {endpoint.id} is disabled ({endpoint.disabled_reason}); nothing was enqueued",
                fix=f"workhorse webhooks enable {endpoint.id}   # once the receiver is fixed",
            )
        if endpoint.events is not None and event not in endpoint.events:
            raise WebhookError(
                code="WEBHOOK_EVENT_NOT_SUBSCRIBED",
                cause=f"webhook endpoint {endpoint.id} takes {', '.join(endpoint.events)}, not {event!r}",
                fix="send only the events the endpoint was added with (add_endpoint(..., events=[...]))",
            )
        message_id = f"msg_{uuid.uuid4().hex}"
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # clock-ok: a field of the body
        body = json.dumps({"type": event, "timestamp": stamp, "data": data}, separators=(",", ":"), ensure_ascii=False)
        job = {
            "endpoint_id": endpoint.id,
            "tenant": endpoint.tenant,
            "event": event,
            "message_id": message_id,
            "body": body,
        }
        return await self._app.jobs[DELIVERY_JOB].enqueue(job, key=key, conn=conn)


def _name(value: Any, what: str, fix: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise WebhookError(
            code="CONFIG_INVALID",
            cause=f"{what} expected text of 1 to {MAX_NAME} characters, got {value!r}",
            fix=fix,
        )
    return value


def _id(value: Any, *, what: str = "endpoint id") -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise WebhookError(
            code="WEBHOOK_ENDPOINT_NOT_FOUND",
            cause=f"{what} {str(value)[:60]!r} is not an endpoint id (a uuid)",
            fix="workhorse webhooks ls   # the endpoints and their ids",
        ) from None


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise WebhookError(
            code="PAGE_LIMIT_INVALID",
            cause=f"limit expected a whole number from 1 to {MAX_PAGE}, got {limit!r}",
            fix="--limit 50",
        )
    return limit
