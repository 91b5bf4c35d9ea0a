"""The webhooks' own errors (every one a ``WorkhorseError`` with its ``code``, ``cause`` and ``fix``).

``WebhookVerificationError`` (the receiving half) lives in ``signing``; these are the sending half's.
"""

from __future__ import annotations

from workhorse.errors import WorkhorseError


class WebhookError(WorkhorseError):
    """An endpoint or a delivery was refused (``WEBHOOK_*``)."""

    code = "WEBHOOK_ERROR"


class WebhookDeliveryError(WebhookError):
    """One attempt failed: the receiver answered something other than 2xx, or never answered.
    Raised by the delivery job after its ledger row is written; the job's retry policy decides."""

    code = "WEBHOOK_DELIVERY_FAILED"


def endpoint_not_found(endpoint_id: str) -> WebhookError:
    return WebhookError(
        code="WEBHOOK_ENDPOINT_NOT_FOUND",
        cause=f"no webhook endpoint with id {endpoint_id!r}",
        fix="workhorse webhooks ls   # the endpoints and their ids",
    )
