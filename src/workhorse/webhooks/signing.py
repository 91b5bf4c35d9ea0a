"""The Standard Webhooks wire format, both halves: signing a delivery and verifying one. Pure:
no I/O, no HTTP client, no clock but the one passed in (``now``).

Design: docs/guides/webhooks.md
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

from workhorse.durations import Duration, to_seconds
from workhorse.errors import WorkhorseError

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
SECRET_BYTES = 24
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
DEFAULT_TOLERANCE = 300.0  # seconds either side of the receiver's clock


class WebhookVerificationError(WorkhorseError):
    """A delivery failed verification; ``code`` says which check refused it (``WEBHOOK_*``)."""

    code = "WEBHOOK_VERIFICATION_FAILED"


def new_secret() -> str:
    """A fresh endpoint secret: ``whsec_`` and 24 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (its base64 part, decoded)."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise WebhookVerificationError(
            code="WEBHOOK_SECRET_INVALID",
            cause="the secret is not a Standard Webhooks secret (it must start with 'whsec_')",
            fix="pass the endpoint's secret exactly as add_endpoint() or rotate_secret() answered it",
        )
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise WebhookVerificationError(
            code="WEBHOOK_SECRET_INVALID",
            cause="the secret's part after 'whsec_' is not base64 of at least one byte",
            fix="pass the endpoint's secret exactly as add_endpoint() or rotate_secret() answered it",
        )
    return key


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 mac>`` of one delivery under one secret."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    mac = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def sign(secrets_: list[str], message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one attempt, signed with every secret given (the newest first)."""
    return {
        HEADER_ID: message_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: " ".join(signature(s, message_id, timestamp, body) for s in secrets_),
    }


def verify(
    *,
    body: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    tolerance: Duration = "5m",
    now: float | None = None,
) -> Any:
    """Verify one delivery and answer its JSON body, parsed. Raises ``WebhookVerificationError``:

    - ``WEBHOOK_HEADERS_MISSING``: ``webhook-id``, ``webhook-timestamp`` or ``webhook-signature`` absent;
    - ``WEBHOOK_TIMESTAMP_INVALID``: the timestamp is not whole Unix seconds;
    - ``WEBHOOK_TIMESTAMP_TOO_OLD`` / ``WEBHOOK_TIMESTAMP_TOO_NEW``: outside ``tolerance`` of ``now``
      (a replay, or a clock far off);
    - ``WEBHOOK_SIGNATURE_INVALID``: no ``v1`` signature matches (compared in constant time);
    - ``WEBHOOK_SECRET_INVALID``: the secret is not a ``whsec_`` secret;
    - ``WEBHOOK_BODY_INVALID``: the signature matched but the body is not JSON.

    ``headers`` may be any mapping (a framework's request headers); names are matched without case.
    """
    window = to_seconds(tolerance, what="tolerance")
    raw = body.encode() if isinstance(body, str) else bytes(body)
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    missing = [h for h in (HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE) if not lower.get(h)]
    if missing:
        raise WebhookVerificationError(
            code="WEBHOOK_HEADERS_MISSING",
            cause=f"the request has no {', '.join(missing)} header",
            fix="pass the request's headers as received (a Standard Webhooks delivery carries all three)",
        )
    stamp_text = lower[HEADER_TIMESTAMP].strip()
    if not (stamp_text.isascii() and stamp_text.isdigit()) or len(stamp_text) > 12:  # "²".isdigit() too
        raise WebhookVerificationError(
            code="WEBHOOK_TIMESTAMP_INVALID",
            cause=f"webhook-timestamp {stamp_text[:40]!r} is not whole Unix seconds",
            fix="refuse the request: a Standard Webhooks sender stamps whole seconds",
        )
    stamp = int(stamp_text)
    clock = time.time() if now is None else now  # clock-ok: the receiver's own clock is the point
    if stamp < clock - window:
        raise WebhookVerificationError(
            code="WEBHOOK_TIMESTAMP_TOO_OLD",
            cause=f"webhook-timestamp is {clock - stamp:.0f}s old, more than the tolerance of {window:g}s "
            "(a replayed or long-delayed request)",
            fix="refuse it; if your clock is wrong, fix NTP (a larger tolerance= widens the replay window)",
        )
    if stamp > clock + window:
        raise WebhookVerificationError(
            code="WEBHOOK_TIMESTAMP_TOO_NEW",
            cause=f"webhook-timestamp is {stamp - clock:.0f}s in the future, more than the tolerance of {window:g}s",
            fix="refuse it; if your clock is behind, fix NTP",
        )
    expected = signature(secret, lower[HEADER_ID], stamp, raw).encode()
    matched = False
    for candidate in lower[HEADER_SIGNATURE].split():
        version, _, _mac = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(candidate.encode(), expected):
            matched = True  # keep comparing: the time taken does not say which one matched
    if not matched:
        raise WebhookVerificationError(
            code="WEBHOOK_SIGNATURE_INVALID",
            cause="no v1 signature in webhook-signature matches the body under this secret",
            fix="verify the raw body as received (not re-serialised JSON) with the endpoint's current secret",
        )
    try:
        return json.loads(raw)
    except ValueError as error:
        raise WebhookVerificationError(
            code="WEBHOOK_BODY_INVALID",
            cause=f"the signature matched but the body is not JSON ({error})",
            fix="check that the raw body bytes were passed, not a decoded or truncated copy",
        ) from error
