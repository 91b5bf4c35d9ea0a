"""The Standard Webhooks format: our signature verified by the reference library, and verify()'s
refusals, each with its own code."""

from __future__ import annotations

import json
import time

import pytest
from standardwebhooks import Webhook

from workhorse.errors import WorkhorseError
from workhorse.webhooks import WebhookVerificationError, sign, verify
from workhorse.webhooks.signing import new_secret

BODY = json.dumps({"type": "order.paid", "data": {"order": 42}}).encode()


def signed(secrets: list[str], *, at: int | None = None, body: bytes = BODY) -> dict[str, str]:
    return sign(secrets, "msg_1", int(time.time()) if at is None else at, body)


def test_the_reference_library_verifies_our_signature() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert Webhook(secret).verify(BODY, signed([secret])) == {"type": "order.paid", "data": {"order": 42}}


def test_verify_accepts_a_good_delivery_and_answers_its_body() -> None:
    secret = new_secret()
    assert verify(body=BODY, headers=signed([secret]), secret=secret) == {"type": "order.paid", "data": {"order": 42}}


def test_either_secret_verifies_during_a_rotation() -> None:
    new, old = new_secret(), new_secret()
    headers = signed([new, old])
    assert len(headers["webhook-signature"].split()) == 2
    for secret in (new, old):
        assert verify(body=BODY, headers=headers, secret=secret)
        assert Webhook(secret).verify(BODY, headers)


def test_headers_match_without_case() -> None:
    secret = new_secret()
    headers = {k.upper(): v for k, v in signed([secret]).items()}
    assert verify(body=BODY.decode(), headers=headers, secret=secret)


def code_of(**kwargs: object) -> str:
    with pytest.raises(WebhookVerificationError) as caught:
        verify(**kwargs)  # type: ignore[arg-type]
    assert isinstance(caught.value, WorkhorseError)
    assert caught.value.cause and caught.value.fix
    return caught.value.code


def test_every_refusal_has_its_own_code() -> None:
    secret, other = new_secret(), new_secret()
    good = signed([secret])
    assert code_of(body=BODY, headers=good, secret=other) == "WEBHOOK_SIGNATURE_INVALID"
    assert code_of(body=BODY + b" ", headers=good, secret=secret) == "WEBHOOK_SIGNATURE_INVALID"
    tampered = {**good, "webhook-id": "msg_2"}
    assert code_of(body=BODY, headers=tampered, secret=secret) == "WEBHOOK_SIGNATURE_INVALID"
    old = signed([secret], at=int(time.time()) - 301)
    assert code_of(body=BODY, headers=old, secret=secret) == "WEBHOOK_TIMESTAMP_TOO_OLD"
    future = signed([secret], at=int(time.time()) + 301)
    assert code_of(body=BODY, headers=future, secret=secret) == "WEBHOOK_TIMESTAMP_TOO_NEW"
    assert verify(body=BODY, headers=old, secret=secret, tolerance="10m")  # a wider window takes it
    for header in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        missing = {k: v for k, v in good.items() if k != header}
        assert code_of(body=BODY, headers=missing, secret=secret) == "WEBHOOK_HEADERS_MISSING"
    assert code_of(body=BODY, headers={**good, "webhook-timestamp": "soon"}, secret=secret) == (
        "WEBHOOK_TIMESTAMP_INVALID"
    )
    for odd in ("\xb2", "\u0663" * 10):  # digits to str.isdigit, not to int()
        assert code_of(body=BODY, headers={**good, "webhook-timestamp": odd}, secret=secret) == (
            "WEBHOOK_TIMESTAMP_INVALID"
        )
    assert code_of(body=BODY, headers=good, secret="not-a-secret") == "WEBHOOK_SECRET_INVALID"
    assert code_of(body=BODY, headers={**good, "webhook-signature": "v2,abc"}, secret=secret) == (
        "WEBHOOK_SIGNATURE_INVALID"
    )
    assert code_of(body=BODY, headers={**good, "webhook-timestamp": "NaN"}, secret=secret) == (
        "WEBHOOK_TIMESTAMP_INVALID"
    )
    for odd in ("v1,ümlaut", "v1,", "v1,AAAA", good["webhook-signature"].upper()):
        assert code_of(body=BODY, headers={**good, "webhook-signature": odd}, secret=secret) == (
            "WEBHOOK_SIGNATURE_INVALID"
        )
    not_json = b"not json"
    assert code_of(body=not_json, headers=signed([secret], body=not_json), secret=secret) == "WEBHOOK_BODY_INVALID"
